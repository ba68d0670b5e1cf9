/* tests/mtp_oracle.h — turns a model file with an MTP layer into that layer's oracle, for the speculative tests
 * that need drafts the target accepts (tests/spec_mtp.sh, tests/cuda/spec_cuda.sh through tests/mk_mtp_oracle). */
#ifndef GUILD_TESTS_MTP_ORACLE_H
#define GUILD_TESTS_MTP_ORACLE_H

#include "core/util/err.h"

/* Rewrites, in place, the F32 file at path (a glm4moe or deepseek2 file of guild-mkmodel --type F32 --nextn 1):
 * every block's outputs (attention, routed and shared experts, dense FFN) zeroed, so that the model's next token is
 * a function of its current one, argmax output(rmsnorm(embed(t), output_norm)); the MTP layer's eh_proj = [I 0]
 * (its normed embedding), enorm ones, its embedding, head and head norm the model's, so that its step from (h, t)
 * is that function of t: its drafts are the model's next tokens; but its head's row of token `wrong` zeroed, so
 * that where the model's next token is `wrong` the draft is another (verify steps that keep some drafts and not the
 * rest). -1 with err naming the tensor that is missing or not F32, the file, or a token out of range. */
int mtp_oracle_make(const char *path, int wrong, guild_err_t *err);

#endif
