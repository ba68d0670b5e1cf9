/* tools/mkmodel/recipe.h — which type each tensor gets.
 *
 * --type T: every matrix (token_embd, attention, experts, shared expert, output) is T; RMSNorm weights, biases
 * and the shared-expert gate vector are F32; the router (ffn_gate_inp) is --router-type (F32 by default, as
 * llama.cpp never quantizes it).
 *
 * --recipe Q4_K_M mimics llama.cpp's llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q4_K_M (src/llama-quant.cpp):
 *   default Q4_K (incl. token_embd, attn_q, attn_k, attn_output, ffn_gate/up _exps and _shexp);
 *   output.weight Q6_K (Q8_0 if its rows are not whole 256-blocks; with tied embeddings token_embd takes this);
 *   attn_v Q6_K and ffn_down (ffn_down_exps and ffn_down_shexp) Q6_K on the layers where use_more_bits(i, n):
 *     i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, else Q4_K;
 *   with exactly 8 experts (Mixtral) attn_v and attn_k Q8_0 and attn_output Q5_K, as llama.cpp does.
 *
 * --recipe MXFP4_MOE is llama.cpp's LLAMA_FTYPE_MOSTLY_MXFP4_MOE: the routed experts (3-D tensors) MXFP4, every
 * other matrix Q8_0 (gpt-oss as OpenAI publishes it: its experts are MXFP4 in the checkpoint).
 *
 * Block-size fallback (all modes), as llama.cpp: when ne[0] is not a multiple of the type's block, Q4_K -> Q5_0,
 * Q5_K -> Q5_1, Q6_K -> Q8_0, and Q2_K, Q3_K, IQ4_XS and the IQ1/IQ2/IQ3 types -> IQ4_NL; then F16 if still
 * incompatible. A 32-element type (Q4_0 ... Q8_0, IQ4_NL, MXFP4) on rows that are not whole blocks is an error
 * (llama.cpp refuses it too).
 */
#ifndef GUILD_MKMODEL_RECIPE_H
#define GUILD_MKMODEL_RECIPE_H

#include <stdbool.h>

#include "core/util/err.h"
#include "tools/mkmodel/config.h"
#include "tools/mkmodel/plan.h"

/* Sets t->wanted and t->type (after fallback) for tensor t (name, role, layer, ne filled in). Fails, naming the
 * tensor, when no type can hold its rows. */
int mkmodel_recipe_choose(const mkmodel_config_t *cfg, mkmodel_tensor_t *t, guild_err_t *err);

/* llama.cpp's general.file_type (llama_ftype) for the configuration. */
uint32_t mkmodel_recipe_file_type(const mkmodel_config_t *cfg);

/* llama.cpp's use_more_bits(i_layer, n_layers). */
bool mkmodel_recipe_more_bits(int64_t layer, int64_t n_layer);

#endif
