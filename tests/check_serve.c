/* Tests for the server's pieces that need no socket: textfilt (UTF-8 repair, stop strings, whatever the
 * split), api_request (every field check names its field), api_json (the shapes OpenAI clients parse), logprobs
 * (log-softmax against a direct computation), metrics (what a request adds to the page) and batch_plan (a
 * request's prompt chunks under --parallel are those it has alone, whatever runs beside it). */
#include "config.h"

#include "coordinator/server/api_json.h"
#include "coordinator/server/api_request.h"
#include "coordinator/server/batch_plan.h"
#include "coordinator/server/logprobs.h"
#include "coordinator/server/metrics.h"
#include "coordinator/server/prefix_cache.h"
#include "coordinator/server/textfilt.h"
#include "tests/check_run.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FFFD "\xef\xbf\xbd"

/* ---- textfilt ----------------------------------------------------------------------------------------- */

static void expect_sanitized(const char *in, size_t n, const char *want)
{
    strbuf_t out = STRBUF_INIT;
    textfilt_sanitize(in, n, &out);
    ck_assert_msg(strbuf_ok(&out), "oom");
    ck_assert_msg(out.len == strlen(want) && !memcmp(strbuf_str(&out), want, out.len), "got [%s] want [%s]",
                  strbuf_str(&out), want);
    strbuf_fini(&out);
}

START_TEST(test_sanitize_cases)
{
    /* expected: one U+FFFD per maximal subpart, as Python's bytes.decode("utf-8", "replace") */
    expect_sanitized("plain", 5, "plain");
    expect_sanitized("caf\xc3\xa9 \xf0\x9f\x98\x80", 10, "caf\xc3\xa9 \xf0\x9f\x98\x80");
    expect_sanitized("\xe2\x82" "A", 3, FFFD "A");            /* truncated sequence, then ASCII */
    expect_sanitized("\x82", 1, FFFD);                        /* stray continuation byte */
    expect_sanitized("\xc0\xaf", 2, FFFD FFFD);               /* overlong lead: not a lead at all */
    expect_sanitized("\xed\xa0\x80", 3, FFFD FFFD FFFD);      /* surrogate: ED takes 80..9F only */
    expect_sanitized("\xe0\x80\x80", 3, FFFD FFFD FFFD);      /* overlong 3-byte */
    expect_sanitized("\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD); /* above U+10FFFF */
    expect_sanitized("\xf0\x9f\x98", 3, FFFD);                /* unfinished at the end: one */
    expect_sanitized("\xf5\xff", 2, FFFD FFFD);
    strbuf_t out = STRBUF_INIT;
    textfilt_sanitize("a\0b", 3, &out); /* NUL is a character like any other */
    ck_assert(out.len == 3 && !memcmp(out.p, "a\0b", 3));
    strbuf_fini(&out);
}
END_TEST

/* Byte-exact Python-equivalent results for every split of a nasty string into 1..3 pieces. */
START_TEST(test_push_any_split_is_the_same)
{
    static const char in[] = "x\xe2\x82\xac\xf0\x9f\x98\x80\xe2\x82y\xed\xa0\x80\xc3\xa9\xf0\x9f\x98";
    size_t n = sizeof in - 1;
    strbuf_t want = STRBUF_INIT;
    textfilt_sanitize(in, n, &want);
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b++) {
            textfilt_t *f = NULL;
            guild_err_t err = {{0}};
            ck_assert_int_eq(textfilt_new(&f, NULL, 0, &err), 0);
            strbuf_t out = STRBUF_INIT;
            ck_assert_int_eq(textfilt_push(f, in, a, &out), 0);
            ck_assert_int_eq(textfilt_push(f, in + a, b - a, &out), 0);
            ck_assert_int_eq(textfilt_push(f, in + b, n - b, &out), 0);
            ck_assert_int_eq(textfilt_finish(f, &out), 0);
            ck_assert_msg(out.len == want.len && !memcmp(out.p, want.p, want.len), "split %zu/%zu differs", a, b);
            strbuf_fini(&out);
            textfilt_destroy(&f);
        }
    strbuf_fini(&want);
}
END_TEST

/* Feeds pieces one by one; returns what was released before each stop and whether a stop was seen. */
static int run_filter(const char *const *stops, size_t n_stops, const char *const *pieces, size_t n_pieces,
                      strbuf_t *out, size_t *released_after_first)
{
    textfilt_t *f = NULL;
    guild_err_t err = {{0}};
    ck_assert_int_eq(textfilt_new(&f, stops, n_stops, &err), 0);
    int stopped = 0;
    for (size_t i = 0; i < n_pieces && !stopped; i++) {
        stopped = textfilt_push(f, pieces[i], strlen(pieces[i]), out);
        if (i == 0 && released_after_first)
            *released_after_first = out->len;
    }
    if (!stopped)
        stopped = textfilt_finish(f, out);
    textfilt_destroy(&f);
    return stopped;
}

START_TEST(test_stop_strings)
{
    strbuf_t out = STRBUF_INIT;
    size_t first;
    /* a stop split over pieces: nothing of it is released */
    const char *stops1[] = {"END"};
    const char *p1[] = {"hello E", "N", "D and more"};
    ck_assert_int_eq(run_filter(stops1, 1, p1, 3, &out, &first), 1);
    ck_assert_str_eq(strbuf_str(&out), "hello ");
    ck_assert_uint_eq(first, 6); /* "E" was held back */
    strbuf_fini(&out);
    /* a false start is released once it cannot match any more */
    const char *p2[] = {"hello E", "ND", "!"};
    const char *stops2[] = {"ENDX"};
    ck_assert_int_eq(run_filter(stops2, 1, p2, 3, &out, NULL), 0);
    ck_assert_str_eq(strbuf_str(&out), "hello END!");
    strbuf_fini(&out);
    /* the earliest of several stops wins, even if another completes first in the stream */
    const char *stops3[] = {"xyz", "b"};
    const char *p3[] = {"aaxy", "zb"};
    ck_assert_int_eq(run_filter(stops3, 2, p3, 2, &out, NULL), 1);
    ck_assert_str_eq(strbuf_str(&out), "aa");
    strbuf_fini(&out);
    /* overlapping prefixes: "aab" in "aaab" */
    const char *stops4[] = {"aab"};
    const char *p4[] = {"a", "a", "a", "b", "c"};
    ck_assert_int_eq(run_filter(stops4, 1, p4, 5, &out, NULL), 1);
    ck_assert_str_eq(strbuf_str(&out), "a");
    strbuf_fini(&out);
    /* a stop at the very start */
    const char *p5[] = {"END"};
    ck_assert_int_eq(run_filter(stops1, 1, p5, 1, &out, NULL), 1);
    ck_assert_str_eq(strbuf_str(&out), "");
    strbuf_fini(&out);
    /* a multi-byte stop against text with repaired bytes in front of it */
    const char *stops6[] = {"\xc3\xa9t\xc3\xa9"};
    const char *p6[] = {"l'\xff\xc3", "\xa9t", "\xc3\xa9 fin"};
    ck_assert_int_eq(run_filter(stops6, 1, p6, 3, &out, NULL), 1);
    ck_assert_str_eq(strbuf_str(&out), "l'" FFFD);
    strbuf_fini(&out);
    /* held text comes out at the end when no stop matches */
    const char *p7[] = {"the EN"};
    ck_assert_int_eq(run_filter(stops1, 1, p7, 1, &out, &first), 0);
    ck_assert_uint_eq(first, 4);
    ck_assert_str_eq(strbuf_str(&out), "the EN");
    strbuf_fini(&out);
}
END_TEST

/* ---- api_request -------------------------------------------------------------------------------------- */

static api_request_t req;

static void parse_ok(api_kind_t kind, const char *body)
{
    api_error_t e;
    ck_assert_msg(api_request_parse(&req, kind, body, strlen(body), 1000, &e) == 0, "%s: %s", body, e.message);
}

static void parse_bad(api_kind_t kind, const char *body, const char *param, const char *fragment)
{
    api_error_t e;
    ck_assert_msg(api_request_parse(&req, kind, body, strlen(body), 1000, &e) == -1, "%s: accepted", body);
    ck_assert_msg(!strcmp(e.param, param), "%s: param [%s], expected [%s]", body, e.param, param);
    ck_assert_msg(strstr(e.message, fragment) != NULL, "%s: message [%s] lacks [%s]", body, e.message, fragment);
    api_request_fini(&req);
}

START_TEST(test_request_defaults)
{
    sample_params_t d;
    sample_params_default(&d);
    parse_ok(API_COMPLETIONS, "{\"prompt\": \"hi\"}");
    ck_assert_str_eq(req.prompt, "hi");
    ck_assert_int_eq(req.max_tokens, 16);
    ck_assert(req.sample.temp == d.temp && req.sample.top_k == d.top_k && req.sample.top_p == d.top_p &&
              req.sample.min_p == d.min_p && req.sample.seed == d.seed);
    ck_assert(!req.stream && !req.include_usage && req.n_stops == 0);
    api_request_fini(&req);
    parse_ok(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n\": 1, \"logprobs\": false,"
                       " \"presence_penalty\": 0, \"model\": \"anything\", \"user\": \"ignored\"}");
    ck_assert_int_eq(req.max_tokens, -1);
    ck_assert_uint_eq(req.n_messages, 1);
    api_request_fini(&req);
}
END_TEST

START_TEST(test_request_fields)
{
    parse_ok(API_COMPLETIONS,
             "{\"prompt\": [\"hi\"], \"max_tokens\": 7.0, \"temperature\": 0, \"top_p\": 0.5, \"top_k\": 3,"
             " \"min_p\": 0.1, \"seed\": 12345678901, \"repetition_penalty\": 1.2, \"repeat_last_n\": 8,"
             " \"stop\": [\"a\", \"bc\"], \"stream\": true, \"stream_options\": {\"include_usage\": true},"
             " \"ignore_eos\": true}");
    ck_assert_str_eq(req.prompt, "hi");
    ck_assert_int_eq(req.max_tokens, 7);
    ck_assert(req.sample.temp == 0 && req.sample.top_p == 0.5f && req.sample.top_k == 3 &&
              req.sample.min_p == 0.1f && req.sample.seed == 12345678901ull && req.sample.repeat_penalty == 1.2f &&
              req.sample.repeat_last_n == 8);
    ck_assert_uint_eq(req.n_stops, 2);
    ck_assert_str_eq(req.stops[1], "bc");
    ck_assert(req.stream && req.include_usage && req.ignore_eos);
    api_request_fini(&req);
    parse_ok(API_COMPLETIONS, "{\"prompt\": [5, 0, 999], \"stop\": \"x\"}");
    ck_assert_uint_eq(req.n_prompt_ids, 3);
    ck_assert_int_eq(req.prompt_ids[2], 999);
    ck_assert_uint_eq(req.n_stops, 1);
    api_request_fini(&req);
    parse_ok(API_CHAT, "{\"messages\": [{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                       " {\"type\": \"text\", \"text\": \"b\"}]}, {\"role\": \"assistant\", \"content\": null}],"
                       " \"max_completion_tokens\": 9, \"reasoning_effort\": \"high\"}");
    ck_assert_str_eq(req.messages[0].role, "system");
    ck_assert_str_eq(req.messages[0].content, "ab");
    ck_assert_str_eq(req.messages[1].content, "");
    ck_assert_int_eq(req.max_tokens, 9);
    ck_assert_str_eq(req.reasoning_effort, "high");
    api_request_fini(&req);
    parse_ok(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": "
                       "{\"reasoning_effort\": \"low\"}}");
    ck_assert_str_eq(req.reasoning_effort, "low");
    api_request_fini(&req);
    parse_ok(API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}");
    ck_assert_ptr_null(req.reasoning_effort);
    api_request_fini(&req);
}
END_TEST

START_TEST(test_request_errors_name_the_field)
{
    api_kind_t C = API_COMPLETIONS, CH = API_CHAT;
    parse_bad(C, "{\"prompt\": ", "", "not valid JSON");
    parse_bad(C, "\"prompt\"", "", "JSON object");
    parse_bad(C, "{\"prompt\": \"a\", \"prompt\": \"b\"}", "", "not valid JSON"); /* duplicate key */
    parse_bad(C, "{}", "prompt", "is required");
    parse_bad(C, "{\"prompt\": null}", "prompt", "is required");
    parse_bad(C, "{\"prompt\": []}", "prompt", "non-empty array");
    parse_bad(C, "{\"prompt\": [[1, 2]]}", "prompt", "only one prompt");
    parse_bad(C, "{\"prompt\": [1, -1]}", "prompt[1]", "token id in [0, 1000)");
    parse_bad(C, "{\"prompt\": [1, 1000]}", "prompt[1]", "token id");
    parse_bad(C, "{\"prompt\": \"x\", \"temperature\": -0.1}", "temperature", ">= 0");
    parse_bad(C, "{\"prompt\": \"x\", \"top_p\": 1.5}", "top_p", "(0, 1]");
    parse_bad(C, "{\"prompt\": \"x\", \"top_k\": -1}", "top_k", "integer in [0,");
    parse_bad(C, "{\"prompt\": \"x\", \"min_p\": -1}", "min_p", "[0, 1]");
    parse_bad(C, "{\"prompt\": \"x\", \"seed\": 1.5}", "seed", "integer");
    parse_bad(C, "{\"prompt\": \"x\", \"repetition_penalty\": 0}", "repetition_penalty", "> 0");
    parse_bad(C, "{\"prompt\": \"x\", \"repeat_last_n\": -2}", "repeat_last_n", "integer");
    parse_bad(C, "{\"prompt\": \"x\", \"max_tokens\": true}", "max_tokens", "integer");
    parse_bad(C, "{\"prompt\": \"x\", \"n\": 3}", "n", "only 1");
    parse_bad(C, "{\"prompt\": \"x\", \"n\": 0}", "n", "integer in [1,");
    parse_bad(C, "{\"prompt\": \"x\", \"best_of\": 2}", "best_of", "only 1");
    parse_bad(C, "{\"prompt\": \"x\", \"echo\": true}", "echo", "not supported");
    parse_bad(C, "{\"prompt\": \"x\", \"suffix\": \"s\"}", "suffix", "not supported");
    parse_bad(C, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 1}}", "logit_bias", "not supported");
    parse_bad(C, "{\"prompt\": \"x\", \"presence_penalty\": 1}", "presence_penalty", "only 0");
    parse_bad(C, "{\"prompt\": \"x\", \"frequency_penalty\": -3}", "frequency_penalty", "[-2, 2]");
    parse_bad(C, "{\"prompt\": \"x\", \"stop\": [\"a\", 5]}", "stop[1]", "non-empty string");
    parse_bad(C, "{\"prompt\": \"x\", \"stop\": {}}", "stop", "string or an array");
    parse_bad(C, "{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
                 "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", "stop", "at most 16");
    parse_bad(C, "{\"prompt\": \"x\", \"stream\": 1}", "stream", "true or false");
    parse_bad(C, "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": \"y\"}}", "stream_options.include_usage",
              "true or false");
    parse_bad(C, "{\"prompt\": \"x\", \"model\": []}", "model", "string");
    parse_bad(CH, "{\"messages\": {}}", "messages", "non-empty array");
    parse_bad(CH, "{\"messages\": [1]}", "messages[0]", "object");
    parse_bad(CH, "{\"messages\": [{\"content\": \"x\"}]}", "messages[0].role", "string");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"function\", \"content\": "
                  "\"x\"}]}", "messages[1].role", "not supported");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content", "is required");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content", "string or");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
              "messages[0].content[0]", "only \"text\"");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
              "messages[0].content[0]", "\"text\" must be a string");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{}]}", "tools",
              "not supported");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": "
                  "\"json_object\"}}", "response_format", "text");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": -5}",
              "max_completion_tokens", "integer");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_effort\": \"max\"}",
              "reasoning_effort", "\"low\", \"medium\" or \"high\"");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": "
                  "{\"reasoning_effort\": 2}}", "chat_template_kwargs.reasoning_effort", "\"low\"");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": 1}",
              "chat_template_kwargs", "object");
}
END_TEST

/* ---- api_json ----------------------------------------------------------------------------------------- */

START_TEST(test_json_shapes)
{
    api_reply_id_t id = {.kind = API_CHAT, .id = "chatcmpl-1", .created = 7, .model = "m"};
    json_t *j = apijson_reply(&id, "hi", 2, NULL, 0, "stop", apijson_usage(3, 2, 1));
    char *s = apijson_dump(j);
    ck_assert_str_eq(s, "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":7,\"model\":\"m\","
                        "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"hi\"},"
                        "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,"
                        "\"completion_tokens\":2,\"total_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":1}}}");
    free(s);
    json_decref(j);
    j = apijson_chunk(&id, "x", 1, NULL, 0, true, NULL);
    s = apijson_dump(j);
    ck_assert_str_eq(s, "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\","
                        "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"x\"},"
                        "\"logprobs\":null,\"finish_reason\":null}]}");
    free(s);
    json_decref(j);
    /* a reasoning model's (gpt-oss): the analysis channel as reasoning_content, as llama.cpp's server */
    j = apijson_reply(&id, "4", 1, "2+2", 3, "stop", NULL);
    s = apijson_dump(j);
    ck_assert_ptr_nonnull(strstr(s, "\"message\":{\"role\":\"assistant\",\"content\":\"4\",\"reasoning_content\":"
                                    "\"2+2\"}"));
    free(s);
    json_decref(j);
    j = apijson_chunk(&id, NULL, 0, "hm", 2, false, NULL);
    s = apijson_dump(j);
    ck_assert_ptr_nonnull(strstr(s, "\"delta\":{\"reasoning_content\":\"hm\"}"));
    free(s);
    json_decref(j);
    id.kind = API_COMPLETIONS;
    j = apijson_chunk(&id, NULL, 0, NULL, 0, false, "length");
    s = apijson_dump(j);
    ck_assert_str_eq(s, "{\"id\":\"chatcmpl-1\",\"object\":\"text_completion\",\"created\":7,\"model\":\"m\","
                        "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}");
    free(s);
    json_decref(j);
    /* a model may produce byte 0: it is a character like any other */
    j = apijson_chunk(&id, "a\0b", 3, NULL, 0, false, NULL);
    s = apijson_dump(j);
    ck_assert_ptr_nonnull(strstr(s, "\"text\":\"a\\u0000b\""));
    free(s);
    json_decref(j);
    j = apijson_error("invalid_request_error", "top_p", "top_p: bad");
    s = apijson_dump(j);
    ck_assert_str_eq(s, "{\"error\":{\"message\":\"top_p: bad\",\"type\":\"invalid_request_error\",\"param\":\"top_p\","
                        "\"code\":null}}");
    free(s);
    json_decref(j);
    j = apijson_error("not_found_error", "", "no");
    s = apijson_dump(j);
    ck_assert_ptr_nonnull(strstr(s, "\"param\":null"));
    free(s);
    json_decref(j);
}
END_TEST

START_TEST(test_request_logprobs)
{
    api_kind_t C = API_COMPLETIONS, CH = API_CHAT;
    parse_ok(C, "{\"prompt\": \"x\", \"logprobs\": 5}");
    ck_assert(req.logprobs && req.top_logprobs == 5);
    api_request_fini(&req);
    parse_ok(C, "{\"prompt\": \"x\", \"logprobs\": 0}"); /* as llama.cpp's server: none */
    ck_assert(!req.logprobs && req.top_logprobs == 0);
    api_request_fini(&req);
    parse_ok(C, "{\"prompt\": \"x\", \"logprobs\": null, \"top_logprobs\": 0}");
    ck_assert(!req.logprobs);
    api_request_fini(&req);
    parse_ok(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logprobs\": true}");
    ck_assert(req.logprobs && req.top_logprobs == 0);
    api_request_fini(&req);
    parse_ok(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logprobs\": true, "
                 "\"top_logprobs\": 20}");
    ck_assert(req.logprobs && req.top_logprobs == 20);
    api_request_fini(&req);
    parse_bad(C, "{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs", "integer in [0, 20]");
    parse_bad(C, "{\"prompt\": \"x\", \"logprobs\": -1}", "logprobs", "integer in [0, 20]");
    parse_bad(C, "{\"prompt\": \"x\", \"logprobs\": true}", "logprobs", "integer");
    parse_bad(C, "{\"prompt\": \"x\", \"top_logprobs\": 3}", "top_logprobs", "not a completions field");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logprobs\": 1}", "logprobs",
              "true or false");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_logprobs\": 2}",
              "top_logprobs", "needs \"logprobs\": true");
    parse_bad(CH, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"logprobs\": true, "
                  "\"top_logprobs\": 21}", "top_logprobs", "integer in [0, 20]");
}
END_TEST

/* ---- logprobs ----------------------------------------------------------------------------------------- */

START_TEST(test_logprobs_against_direct)
{
    enum { V = 1000 };
    static float x[V];
    uint64_t s = 12345;
    for (int i = 0; i < V; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 40) / (double)(1 << 24) * 30.0 - 15.0);
    }
    x[17] = x[3]; /* a tie: the smaller id first */
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        m = fmax(m, x[i]);
    for (int i = 0; i < V; i++)
        sum += exp(x[i] - m);
    double total = 0;
    logprob_entry_t e;
    for (int i = 0; i < V; i++) {
        logprobs_compute(x, V, i, 0, &e);
        ck_assert_int_eq(e.id, i);
        ck_assert_int_eq(e.n_top, 0);
        ck_assert(e.logprob <= 0);
        ck_assert_msg(fabs(e.logprob - (x[i] - m - log(sum))) < 1e-5, "id %d: %g", i, (double)e.logprob);
        total += exp(e.logprob);
    }
    ck_assert_msg(fabs(total - 1) < 1e-4, "the probabilities sum to %.8f", total);
    logprobs_compute(x, V, 5, LOGPROBS_MAX_TOP, &e);
    ck_assert_int_eq(e.n_top, LOGPROBS_MAX_TOP);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best])
            best = i;
    ck_assert_int_eq(e.top[0].id, best);
    for (int k = 0; k < LOGPROBS_MAX_TOP; k++) {
        ck_assert(e.top[k].logprob <= 0);
        if (k) {
            ck_assert(e.top[k].logprob <= e.top[k - 1].logprob);
            ck_assert(x[e.top[k].id] < x[e.top[k - 1].id] ||
                      (x[e.top[k].id] == x[e.top[k - 1].id] && e.top[k].id > e.top[k - 1].id));
        }
        int above = 0; /* exactly k tokens come before the k-th in the total order */
        for (int i = 0; i < V; i++)
            above += x[i] > x[e.top[k].id] || (x[i] == x[e.top[k].id] && i < e.top[k].id);
        ck_assert_int_eq(above, k);
    }
    /* NaN counts as -infinity: floored, and never in the top list ahead of a number */
    float y[4] = {NAN, 1.0f, -INFINITY, 1.0f};
    logprobs_compute(y, 4, 0, 4, &e);
    ck_assert(e.logprob == LOGPROB_FLOOR);
    ck_assert_int_eq(e.n_top, 4);
    ck_assert_int_eq(e.top[0].id, 1);
    ck_assert_int_eq(e.top[1].id, 3);
    ck_assert(fabs(e.top[0].logprob - log(0.5)) < 1e-6);
    ck_assert(e.top[2].logprob == LOGPROB_FLOOR && e.top[2].id == 0);
    /* n_top above the vocabulary: all of it */
    logprobs_compute(y, 2, 1, 20, &e);
    ck_assert_int_eq(e.n_top, 2);
    ck_assert(e.top[0].logprob == 0.0f);
}
END_TEST

/* ---- metrics ------------------------------------------------------------------------------------------ */

START_TEST(test_metrics_counts)
{
    metrics_t *m = NULL;
    ck_assert_int_eq(metrics_new(&m), 0);
    job_status_t st = {.end = JOB_LENGTH, .n_prompt = 7, .n_cached = 2, .n_generated = 5, .prefill_s = 0.25,
                       .decode_s = 0.5};
    metrics_request(m, API_CHAT, metrics_outcome_of(st.end), &st);
    metrics_request(m, API_COMPLETIONS, METRICS_INVALID, NULL);
    st.end = JOB_RUNNING; /* its client left before it ended: counted, without tokens */
    metrics_request(m, API_COMPLETIONS, metrics_outcome_of(st.end), &st);
    const engine_stats_t es = {.running = 1, .waiting = 3, .kv_used = 64, .kv_capacity = 256, .busy_s = 2,
                               .expert_wait_s = 0.5, .gpu_restarts = 1, .cpu_restarts = 2};
    strbuf_t o = STRBUF_INIT;
    metrics_render(m, &es, &o);
    const char *page = strbuf_str(&o);
    const char *want[] = {
        "# TYPE guild_requests_total counter\n",
        "guild_requests_total{endpoint=\"chat_completions\",outcome=\"length\"} 1\n",
        "guild_requests_total{endpoint=\"completions\",outcome=\"invalid\"} 1\n",
        "guild_requests_total{endpoint=\"completions\",outcome=\"cancelled\"} 1\n",
        "guild_prompt_tokens_total 7\n",
        "guild_prompt_tokens_cached_total 2\n",
        "guild_generated_tokens_total 5\n",
        "guild_prefill_seconds_total 0.25\n",
        "guild_request_duration_seconds_bucket{le=\"0.5\"} 0\n",
        "guild_request_duration_seconds_bucket{le=\"1\"} 1\n",
        "guild_request_duration_seconds_bucket{le=\"+Inf\"} 1\n",
        "guild_request_duration_seconds_count 1\n",
        "guild_requests_waiting 3\n",
        "guild_kv_cache_usage_ratio 0.25\n",
        "guild_cpu_expert_wait_ratio 0.25\n",
        "guild_worker_restarts_total{role=\"cpu\"} 2\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(page, want[i]) != NULL, "the page lacks %s", want[i]);
    ck_assert(page[o.len - 1] == '\n');
    strbuf_fini(&o);
    metrics_destroy(&m);
    ck_assert_ptr_null(m);
}
END_TEST


/* ---- the prefix cache's store (prefix_cache.h) ---- */

static void *blob_of(size_t n, int fill)
{
    char *b = malloc(n);
    memset(b, fill, n);
    return b;
}

START_TEST(test_pcache_match_lru_and_files)
{
    guild_err_t err = {{0}};
    char dir[] = "/tmp/guild-pcache-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pcache_options_t o = {.ram_max = 250, .dir = NULL, .disk_max = 1 << 20,
                          .id = {.model_size = 7, .model_hash = 9, .backend = "cpu", .kv_type = 0}};
    pcache_t *c;
    ck_assert_msg(pcache_new(&c, &o, &err) == 0, "%s", err.msg);
    const int32_t a[] = {1, 2, 3, 4, 5, 6}, b[] = {1, 2, 9, 9}, q[] = {1, 2, 3, 4, 7, 7, 7};
    uint64_t key;
    ck_assert_int_eq(pcache_match(c, q, 6, &key), 0);
    ck_assert_int_eq(pcache_put(c, a, 4, blob_of(100, 1), 100, &err), 0);
    ck_assert(pcache_covers(c, a, 3));
    ck_assert(!pcache_covers(c, a, 5));
    ck_assert_int_eq(pcache_put(c, a, 6, blob_of(100, 2), 100, &err), 0); /* replaces the one it extends */
    pcache_stats_t st;
    pcache_stats(c, &st);
    ck_assert_int_eq(st.entries, 1);
    ck_assert_int_eq(pcache_match(c, q, 6, &key), 4);
    ck_assert_int_eq(pcache_match(c, q, 3, &key), 3); /* at most n_max */
    const void *p;
    size_t n;
    ck_assert_int_eq(pcache_get(c, key, &p, &n, &err), 0);
    ck_assert_int_eq(n, 100);
    ck_assert_int_eq(((const char *)p)[0], 2);
    ck_assert_int_eq(pcache_put(c, b, 4, blob_of(100, 3), 100, &err), 0);
    ck_assert_int_eq(pcache_put(c, q, 7, blob_of(100, 4), 100, &err), 0); /* 300 > 250: the LRU (a) goes */
    pcache_stats(c, &st);
    ck_assert_int_eq(st.entries, 2);
    ck_assert_int_eq(st.ram_bytes, 200);
    ck_assert_uint_eq(st.evictions, 1);
    ck_assert_int_eq(pcache_match(c, a, 6, &key), 4); /* q's first four */
    pcache_destroy(&c);

    /* files: written, read back by a new store, refused when foreign or damaged */
    o.dir = dir;
    o.ram_max = 0; /* files only */
    ck_assert_msg(pcache_new(&c, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(pcache_put(c, a, 6, blob_of(64, 5), 64, &err), 0);
    pcache_stats(c, &st);
    ck_assert_int_eq(st.ram_bytes, 0);
    ck_assert_int_eq(st.disk_bytes, 80 + 6 * 4 + 64);
    pcache_destroy(&c);
    ck_assert_msg(pcache_new(&c, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(pcache_match(c, q, 7, &key), 4);
    ck_assert_int_eq(pcache_get(c, key, &p, &n, &err), 0);
    ck_assert_int_eq(n, 64);
    ck_assert_int_eq(((const char *)p)[63], 5);
    pcache_destroy(&c);
    pcache_options_t other = o;
    other.id.model_hash = 10;
    ck_assert_msg(pcache_new(&c, &other, &err) == 0, "%s", err.msg);
    pcache_stats(c, &st);
    ck_assert_int_eq(st.entries, 0);
    ck_assert_uint_eq(st.refused, 1);
    pcache_destroy(&c);
    /* a flipped byte of the blob: found when it is read */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "f=$(ls %s/pfx-*.snap) && printf '\\377' | dd of=\"$f\" bs=1 seek=120 conv=notrunc "
             "2>/dev/null", dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_msg(pcache_new(&c, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(pcache_match(c, q, 7, &key), 4);
    ck_assert_int_ne(pcache_get(c, key, &p, &n, &err), 0);
    ck_assert_msg(strstr(err.msg, "corrupt"), "%s", err.msg);
    ck_assert_int_eq(pcache_match(c, q, 7, &key), 0); /* never used again */
    pcache_destroy(&c);
    /* a recurrent model's snapshots are whole or nothing */
    o.dir = NULL;
    o.ram_max = 1000;
    o.recurrent = true;
    ck_assert_msg(pcache_new(&c, &o, &err) == 0, "%s", err.msg);
    ck_assert_int_eq(pcache_put(c, a, 4, blob_of(10, 1), 10, &err), 0);
    ck_assert_int_eq(pcache_put(c, a, 6, blob_of(10, 1), 10, &err), 0);
    ck_assert_int_eq(pcache_match(c, q, 7, &key), 4);
    ck_assert_int_eq(pcache_match(c, a, 5, &key), 4);
    ck_assert(!pcache_covers(c, a, 5));
    pcache_destroy(&c);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- batch_plan ---------------------------------------------------------------------------------------- */

#define SIM_MAX_REQ 24
#define SIM_MAX_CHUNKS 256

/* A request of the simulated batched loop: it arrives at step `arrive`, reuses n_past prompt tokens, is
 * snapshotted at snap_at (-1: not), decodes `gen` rows after its prompt. */
typedef struct sim_req {
    int32_t arrive, n_prompt, n_past, snap_at, gen;
    int32_t n_done, decoded, admitted, left_out; /* left_out: consecutive steps a decoding request sat out */
    bool running, done;
    int32_t chunk[SIM_MAX_CHUNKS][2]; /* its prompt's chunks: start, tokens */
    int n_chunks;
} sim_req_t;

/* The chunks the request alone is prefilled in (engine.c's serial loop: prefill_to up to the snapshot point, then
 * generate.c's chunks): n_batch at a time from n_past, cut at snap_at. */
static int alone_chunks(const sim_req_t *r, int32_t n_batch, int32_t (*out)[2])
{
    int n = 0;
    const int32_t cut = r->snap_at > r->n_past ? r->snap_at : r->n_past;
    for (int32_t p = r->n_past; p < cut; p += n_batch, n++) {
        out[n][0] = p;
        out[n][1] = cut - p < n_batch ? cut - p : n_batch;
    }
    for (int32_t p = cut; p < r->n_prompt; p += n_batch, n++) {
        out[n][0] = p;
        out[n][1] = r->n_prompt - p < n_batch ? r->n_prompt - p : n_batch;
    }
    return n;
}

/* Runs the requests through the batched loop's placement with `parallel` sequences and batches of n_batch
 * rows: they join in arrival order when a sequence is free, every running one wants its row or whole chunk.
 * Checks each step's rows, that no decoding request sits out two steps running and that all end. */
static void simulate(sim_req_t *req, int n_req, int parallel, int32_t n_batch)
{
    bool owed = false;
    int n_done = 0;
    for (int32_t t = 0; n_done < n_req; t++) {
        ck_assert_msg(t < 100000, "the requests never end");
        int active = 0;
        for (int i = 0; i < n_req; i++)
            active += req[i].running;
        for (int i = 0; i < n_req && active < parallel; i++) /* arrival order; the admission order follows */
            if (!req[i].running && !req[i].done && req[i].arrive <= t) {
                req[i].running = true;
                req[i].admitted = t;
                req[i].n_done = req[i].n_past;
                active++;
            }
        int idx[SIM_MAX_REQ], n = 0;
        for (int i = 0; i < n_req; i++) /* admission order: by admitted step, then arrival */
            if (req[i].running) {
                int k = n++;
                while (k > 0 && req[idx[k - 1]].admitted > req[i].admitted) {
                    idx[k] = idx[k - 1];
                    k--;
                }
                idx[k] = i;
            }
        batch_want_t want[SIM_MAX_REQ];
        int32_t take[SIM_MAX_REQ];
        for (int k = 0; k < n; k++) {
            const sim_req_t *r = &req[idx[k]];
            want[k] = r->n_done < r->n_prompt
                          ? (batch_want_t){batch_plan_chunk(r->n_done, r->n_prompt, r->snap_at, n_batch), true}
                          : (batch_want_t){1, false};
        }
        const int32_t rows = batch_plan_place(want, n, n_batch, &owed, take);
        ck_assert_msg(rows <= n_batch, "step %d: %d rows in batches of %d", t, rows, n_batch);
        ck_assert_msg(n == 0 || rows > 0, "step %d: %d requests running, none in the step", t, n);
        int32_t sum = 0;
        for (int k = 0; k < n; k++) {
            sim_req_t *r = &req[idx[k]];
            sum += take[k];
            ck_assert_msg(take[k] == 0 || take[k] == want[k].rows, "step %d: a part of a chunk", t);
            if (want[k].prompt) {
                if (!take[k])
                    continue;
                ck_assert_int_lt(r->n_chunks, SIM_MAX_CHUNKS);
                r->chunk[r->n_chunks][0] = r->n_done;
                r->chunk[r->n_chunks++][1] = take[k];
                r->n_done += take[k];
                if (r->n_done == r->snap_at)
                    r->snap_at = -r->snap_at - 2; /* taken (the engine forgets it; kept here, encoded) */
                continue;
            }
            r->left_out = take[k] ? 0 : r->left_out + 1;
            ck_assert_msg(r->left_out < 2, "step %d: a decoding request sat out two steps running", t);
            if (take[k] && ++r->decoded == r->gen) {
                r->running = false;
                r->done = true;
                n_done++;
            }
        }
        ck_assert_int_eq(sum, rows);
    }
    int32_t want_chunks[SIM_MAX_CHUNKS][2];
    for (int i = 0; i < n_req; i++) {
        sim_req_t *r = &req[i];
        if (r->snap_at < -1)
            r->snap_at = -r->snap_at - 2;
        const int nw = alone_chunks(r, n_batch, want_chunks);
        ck_assert_msg(r->n_chunks == nw, "request %d (prompt %d from %d, snapshot %d): %d chunks, alone %d", i,
                      r->n_prompt, r->n_past, r->snap_at, r->n_chunks, nw);
        for (int k = 0; k < nw; k++)
            ck_assert_msg(r->chunk[k][0] == want_chunks[k][0] && r->chunk[k][1] == want_chunks[k][1],
                          "request %d chunk %d: [%d, +%d), alone [%d, +%d)", i, k, r->chunk[k][0], r->chunk[k][1],
                          want_chunks[k][0], want_chunks[k][1]);
    }
}

START_TEST(test_batch_plan_chunk)
{
    ck_assert_int_eq(batch_plan_chunk(0, 100, -1, 32), 32);
    ck_assert_int_eq(batch_plan_chunk(96, 100, -1, 32), 4);
    ck_assert_int_eq(batch_plan_chunk(0, 100, 40, 64), 40);  /* cut at the snapshot point */
    ck_assert_int_eq(batch_plan_chunk(40, 100, 40, 64), 60); /* past it: ignored */
    ck_assert_int_eq(batch_plan_chunk(100, 100, -1, 32), 0);
    /* the oldest prompt's chunk does not fit beside the decode rows: left out, then first at the next step */
    const batch_want_t w[3] = {{1, false}, {16, true}, {1, false}};
    int32_t take[3];
    bool owed = false;
    ck_assert_int_eq(batch_plan_place(w, 3, 16, &owed, take), 2);
    ck_assert(owed && take[0] == 1 && take[1] == 0 && take[2] == 1);
    ck_assert_int_eq(batch_plan_place(w, 3, 16, &owed, take), 16);
    ck_assert(!owed && take[0] == 0 && take[1] == 16 && take[2] == 0);
    /* room for it beside them: all three */
    ck_assert_int_eq(batch_plan_place(w, 3, 18, &owed, take), 18);
    ck_assert(!owed && take[1] == 16);
}
END_TEST

/* Long prompts beside decoding requests and each other, with reused prefixes and snapshot points: every request's
 * chunks are its chunks alone (the old loop cut a prompt to whatever room the others left). */
START_TEST(test_batch_plan_chunks_as_alone)
{
    sim_req_t fixed[] = {
        {.arrive = 0, .n_prompt = 5, .snap_at = -1, .gen = 40},    {.arrive = 0, .n_prompt = 100, .snap_at = -1, .gen = 3},
        {.arrive = 2, .n_prompt = 70, .n_past = 3, .snap_at = -1, .gen = 9},
        {.arrive = 1, .n_prompt = 45, .snap_at = 37, .gen = 2},    {.arrive = 9, .n_prompt = 33, .snap_at = -1, .gen = 5},
        {.arrive = 9, .n_prompt = 1, .snap_at = -1, .gen = 30},
    };
    const int nf = (int)(sizeof fixed / sizeof fixed[0]);
    simulate(fixed, nf, 4, 16);
    uint64_t lcg = 12345;
#define RND(m) ((lcg = lcg * 6364136223846793005ull + 1442695040888963407ull), (int32_t)((lcg >> 33) % (uint64_t)(m)))
    for (int trial = 0; trial < 300; trial++) {
        const int parallel = 2 + RND(7), n_req = 1 + RND(SIM_MAX_REQ);
        const int32_t batches[] = {parallel, parallel + 1, 16, 33, 64, 512};
        const int32_t n_batch = batches[RND(6)];
        sim_req_t req[SIM_MAX_REQ];
        memset(req, 0, sizeof req);
        for (int i = 0; i < n_req; i++) {
            sim_req_t *r = &req[i];
            r->arrive = RND(40);
            r->n_prompt = 1 + RND(300);
            r->n_past = RND(4) ? 0 : RND(r->n_prompt);
            r->snap_at = RND(3) ? -1 : r->n_past + RND(r->n_prompt - r->n_past);
            r->gen = 1 + RND(60);
        }
        simulate(req, n_req, parallel, n_batch);
    }
#undef RND
}
END_TEST

static Suite *serve_suite(void)
{
    Suite *s = suite_create("serve");
    TCase *tc = tcase_create("textfilt");
    tcase_add_test(tc, test_sanitize_cases);
    tcase_add_test(tc, test_push_any_split_is_the_same);
    tcase_add_test(tc, test_stop_strings);
    suite_add_tcase(s, tc);
    tc = tcase_create("api_request");
    tcase_add_test(tc, test_request_defaults);
    tcase_add_test(tc, test_request_fields);
    tcase_add_test(tc, test_request_errors_name_the_field);
    tcase_add_test(tc, test_request_logprobs);
    suite_add_tcase(s, tc);
    tc = tcase_create("logprobs");
    tcase_add_test(tc, test_logprobs_against_direct);
    suite_add_tcase(s, tc);
    tc = tcase_create("metrics");
    tcase_add_test(tc, test_metrics_counts);
    suite_add_tcase(s, tc);
    tc = tcase_create("prefix_cache");
    tcase_add_test(tc, test_pcache_match_lru_and_files);
    suite_add_tcase(s, tc);
    tc = tcase_create("batch_plan");
    tcase_add_test(tc, test_batch_plan_chunk);
    tcase_add_test(tc, test_batch_plan_chunks_as_alone);
    suite_add_tcase(s, tc);
    tc = tcase_create("api_json");
    tcase_add_test(tc, test_json_shapes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(serve_suite());
}
