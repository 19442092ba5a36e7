// test_cli_keys.c — dmsh as a process, on what the config commands say about keys (QA, session
// 32): :help KEY, the notes of :set for keys that change nothing as the config stands, the
// refusal of a weight decay that would flip the weights' sign, :preset's line naming every key
// it set, where a live model's engram_ram refusal points, and an :init the build refuses.
#include "cli_harness.h"

// :help lr answered "unknown command ':lr' (did you mean :arm?)": no way from :help to a key
static void test_help_key(void **s) {
    (void)s;
    expect_ok(":set lr=0.002\n:help lr\n:help d\n:help L\n:help step\n:help opt\n");
    expect_out("lr: AdamW and table learning rate\n  values: a number in [0, 10]; default 0.003; now 0.002\n"
               "  live: :set lr=VALUE on a live model takes effect from the next step");
    expect_out("d: model width\n  values: an integer in [1, 65536] (decimal digits); default 128; now 128\n"
               "  architecture key: :set it before :init; a live model is rebuilt with it by :init d=VALUE\n");
    expect_out("L: loop depth: iterations of the shared block\n");  // a key, not the :load prefix
    expect_out(":step [N]\n  Take N optimizer steps");          // a command is still a command
    expect_out("opt: mix: Muon + AdamW + Adam tables; adamw: AdamW everywhere\n  values: one of mix|adamw; default mix");
    expect_error(":help nosuchthing\n", "unknown command ':nosuchthing'");
    expect_out("");
    assert_non_null(strstr(err_, "nor is 'nosuchthing' a config key (:show config lists them)"));
    expect_ok(":help eval_bytes\n:help anchor_fit_bytes\n");  // read by no step (QA, session 33)
    expect_out("live: :set eval_bytes=VALUE on a live model takes effect at the next eval and :anchors (the eval window)");
    expect_out("live: :set anchor_fit_bytes=VALUE on a live model takes effect at the next :anchors");
    // an arm's name: what it is and what off does (QA, session 35: "unknown command")
    expect_ok(":help rezero\n:help :engram\n");
    expect_out("arm rezero (:arm rezero on|off; :help arm for the switch and its counters)\n  the ReZero scale: h = h + alpha*body, alpha "
               "learned from 0. Off: alpha is fixed at 1 (not stepped)");
    expect_out("arm engram (:arm engram on|off;");
    expect_ok(":help set\n");
    expect_out(":help KEY explains one");
}

// keys accepted in silence that change nothing: Muon's under opt=adamw, eval_frac with an eval=
// file (the losses with lr_muon 0.02 and 5 under adamw were the same to every digit)
static void test_set_notes(void **s) {
    (void)s;
    char script[2000];
    expect_ok(":set opt=adamw lr_muon=0.05\n:set muon_momentum=0.9\n:set lr_muon=0.01 opt=mix\n");
    expect_out("note: lr_muon has no effect with opt=adamw");
    expect_out("note: muon_momentum has no effect with opt=adamw");
    assert_int_equal(count_lines(out), 2);  // not for the :set that switched back to mix
    snprintf(script, sizeof script, ":data %s eval=%s\n:set eval_frac=0.2\n:data %s\n:set eval_frac=0.3\n", corpus, corpus, corpus);
    expect_ok(script);
    expect_out("note: eval_frac has no effect while an eval= file is the held-out set");
    assert_null(strstr(strstr(out, "eval_frac has no effect") + 1, "eval_frac has no effect"));  // once: not without eval=
}

// keys of an arm that is off and the CUDA backend's on the CPU were accepted in silence where the
// Muon keys were said; and a new horizon on a model past its old one sent the lr from the floor
// back to 0.6x unsaid (":set steps=N to extend"): said, with both rates (QA, session 35)
static void test_set_notes_arms_and_schedule(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:set retract_every=3 moe_aux=0.1\n:arm retract off\n:set retract_every=4\n"
             ":arm moe off\n:set retract_iters=6 moe_aux=0.2\n:set precision=fp32 cuda_graph=off\n", SMALL, corpus);
    expect_ok(script);
    assert_true(strstr(out, "note:") > strstr(out, "arm retract off"));  // (every arm on: no note)
    expect_out("arm retract off\nnote: retract_every has no effect while the retract arm is off (:show arms)\n");
    expect_out("note: retract_iters has no effect while the moe arm is off, so nothing is retracted (:show arms)\n");
    expect_out("note: moe_aux has no effect while the moe arm is off (:show arms)\n");
    expect_out("note: precision has no effect on the CPU backend: it is the CUDA backend's (:device cuda)\n");
    expect_out("note: cuda_graph has no effect on the CPU backend: it is the CUDA backend's (:device cuda)\n");
    assert_int_equal(count_lines(strstr(out, "arm retract off")), 7);
    snprintf(script, sizeof script, "%s:set warmup=5\n:data %s\n:init seed=1\n:train 30 log_every=30 eval_every=0\n:train 10 log_every=10 eval_every=0\n"
             ":set steps=80\n:set steps=80\n", SMALL, corpus);
    expect_ok(script);
    expect_out("note: the schedule ends at steps=30; steps past it run at the floor lr (0.1x): :set steps=N gives it a new end, the cosine "
               "recomputed over it (steps=40: step 30 at 0.27x of lr, a warm restart of the decay)\n");
    expect_out("note: step 40's lr goes from 3.000e-04 to 1.791e-03 (0.1x to 0.597x of lr): the schedule is a function of the step and steps=80, "
               "recomputed over it, not continued from where it was (a warm restart of the decay)\n");
    assert_null(strstr(strstr(out, "note: step 40's lr") + 1, "note: step 40's lr"));  // once: the second :set changes nothing
    // a shorter horizon lowers the lr: said, but not as a warm restart (QA mutation, session 36:
    // the words on any change went unseen)
    snprintf(script, sizeof script, "%s:set warmup=5 steps=80\n:data %s\n:init seed=1\n:train 40 log_every=40 eval_every=0\n:set steps=45\n",
             SMALL, corpus);
    expect_ok(script);
    const char *n = strstr(out, "note: step 40's lr goes from 1.791e-03 to ");
    if (!n) print_error("%s\n", out);
    assert_non_null(n);
    const char *e = n + strcspn(n, "\n");  // (the line ends with no reason after it)
    assert_true(e - n > 31 && !strncmp(e - 31, "not continued from where it was", 31));
    assert_null(strstr(out, "warm restart"));
}

// :step before any horizon runs the steps after the warmup at the full lr (no horizon, no
// decay); the first :train's horizon puts the next step on its cosine from the warmup's end, 0.47x
// of lr at once after 5 such steps: said on its schedule line (QA audit, session 40: unsaid). A
// first :train whose steps before it stayed inside the warmup drops nothing and says nothing more.
static void test_first_horizon_after_steps(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:set warmup=5\n:data %s\n:init seed=1\n:step 10\n:train 4 eval_every=0\n", SMALL, corpus);
    expect_ok(script);
    expect_out("step 9 loss ");
    assert_non_null(strstr(strstr(out, "step 9 loss "), " lr 3.000e-03 "));  // (the full lr, no horizon)
    expect_out("schedule: cosine to 0.1x lr at step 14 (steps=14; :set steps=N to change); the lr drops from 1x to 0.47x of lr at "
               "once: with no horizon (steps=0) the steps after the warmup (from step 5) run at the full lr, and this horizon's cosine is "
               "at 0.47x by step 10\nstep 10 loss ");
    assert_non_null(strstr(strstr(out, "step 10 loss "), " lr 1.416e-03 "));  // 0.472 x 3e-3, as said
    snprintf(script, sizeof script, "%s:set warmup=5\n:data %s\n:init seed=1\n:step 5\n:train 4 eval_every=0\n", SMALL, corpus);
    expect_ok(script);  // (step 5 is the warmup's end: the cosine starts there at 1x)
    expect_out("schedule: cosine to 0.1x lr at step 9 (steps=9; :set steps=N to change)\nstep 5 loss ");
    assert_non_null(strstr(strstr(out, "step 5 loss "), " lr 3.000e-03 "));
}

// :set steps= to or from 0 on a stepped model moves the next step's lr as any horizon change does:
// said (QA, session 41: the note came only when both the old and the new horizon were > 0; 1x
// to 0.27x after 30 steps, and a decayed run's 0.1x back to the full lr, went unsaid)
static void test_steps_to_and_from_zero_said(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:set warmup=5\n:data %s\n:init seed=1\n:step 30\n:set steps=40\n:set steps=0\n", SMALL, corpus);
    expect_ok(script);
    expect_out("note: step 30's lr goes from 3.000e-03 to 8.083e-04 (1x to 0.269x of lr): the schedule is a function of the step and steps=40, "
               "recomputed over it, not continued from where it was\n");
    expect_out("note: step 30's lr goes from 8.083e-04 to 3.000e-03 (0.269x to 1x of lr): steps=0 is no horizon: the steps after the warmup "
               "run at the full lr until a :train sets one\n");
    assert_null(strstr(out, "warm restart"));
    // inside the warmup nothing moves: nothing said
    snprintf(script, sizeof script, "%s:set warmup=5\n:data %s\n:init seed=1\n:step 3\n:set steps=40\n", SMALL, corpus);
    expect_ok(script);
    assert_null(strstr(out, "lr goes from"));
}

// the decoupled decay multiplies the weights by 1 - lr x wd each step: above 2 that factor's size
// passes 1 (lr=10 wd=10: -99, the loss 3.6e8 by step 4): refused with the product, on :set, on
// :init and for :stress's multiplier, nothing changed; between 1 and 2 (a sign flip that shrinks,
// which QA saw train) a note; exactly 1 (lr=10 at the default wd, how tests make a run diverge)
// nothing
static void test_decay_that_flips(void **s) {
    (void)s;
    char script[2000];
    expect_error(":set lr=0.5 wd=5\n", "s.dm:1: error: lr x wd = 0.5 x 5 = 2.5 > 2: the decoupled decay would multiply the weights by -1.5");
    expect_error(":set lr_muon=0.2 wd=11\n", "error: bad value '11' for wd: expected a number in [0, 10]");   // (wd's own range first)
    expect_error(":set lr_muon=0.3 wd=9\n", "error: lr_muon x wd = 0.3 x 9 = 2.7 > 2");
    expect_ok(":set lr=10 lr_muon=10\n");  // x the default wd 0.1: 1, no note
    assert_null(strstr(out, "note:"));
    expect_ok(":set lr_muon=0.2 wd=6\n:set wd=6\n");   // 1.2: a note, once (the second :set changes nothing)
    expect_out("note: lr_muon x wd = 1.2 > 1: the decoupled decay multiplies the weights by -0.2 each step");
    assert_int_equal(count_lines(out), 1);
    // both rates past 1: both named (a :set of lr alone named only lr_muon's pair), and :init's
    // words give the note as :set's do (they gave none: QA, session 41)
    expect_ok(":set lr_muon=5 wd=0.3\n:set lr=4.1\n");
    expect_out("note: lr x wd = 1.23 and lr_muon x wd = 1.5 > 1: the decoupled decay multiplies the AdamW tensors by -0.23 and the Muon "
               "matrices by -0.5 each step (1 - rate x wd): their sign flips every step\n");
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1 lr=4 wd=0.3\n", SMALL, corpus);
    expect_ok(script);
    expect_out("config: lr 0.003 -> 4, wd 0.1 -> 0.3\nnote: lr x wd = 1.2 > 1: the decoupled decay multiplies the weights by -0.2 each step");
    // (only when a word sets one of its keys: an :init of another seed says nothing more)
    snprintf(script, sizeof script, "%s:data %s\n:set lr_muon=5 wd=0.3\n:init seed=2\n", SMALL, corpus);
    expect_ok(script);
    assert_int_equal(strstr(strstr(out, "note: lr_muon x wd = 1.5 > 1") + 1, "note: lr_muon x wd") == NULL, 1);
    expect_ok(":set opt=adamw lr_muon=0.3 wd=9 lr=0.1\n:show config\n");  // Muon's rate unused under adamw
    expect_out("lr_muon          0.3");
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:set lr=0.5\n:init wd=5\n", SMALL, corpus);
    expect_error(script, "s.dm:6: error: lr x wd = 0.5 x 5 = 2.5 > 2");
    // :stress's multiplier: lr_muon 0.02 x 1100 = 22, x wd 0.1 = 2.2 (refused before any step)
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:stress lr_mult=1100 steps=3\n", SMALL, corpus);
    expect_error(script, "s.dm:5: error: lr_mult=1100 makes lr_muon x wd = 22 x 0.1 = 2.2 > 2");
    assert_non_null(strstr(err_, "lr_mult=1000 at most (or a lower wd)"));
    assert_null(strstr(out, "stress lr_mult"));
}

// :preset printed the shape but not the Engram keys it set (:preset large turns engram_ram on)
static void test_preset_line(void **s) {
    (void)s;
    expect_ok(":preset large\n");
    expect_out("preset large: d=1024 H=16 L=4 E=16 k=2 r=256 f=4096 seq=1024 batch=32 engram_rows=4000000 engram_dim=64 "
               "engram_orders=2,3,4 engram_ram=on\n");
}

// a live model's engram_ram: a placement a checkpoint moves between, and the refusal says how
// (it named only a fresh :init, which throws the trained weights away); the route it names works
static void test_engram_ram_route(void **s) {
    (void)s;
    char script[2000];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:step 2\n:set engram_ram=on\n", SMALL, corpus);
    expect_error(script, "`:save F; :init engram_ram=on; :load F` moves this model's weights there");
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:step 2\n:save a.ckpt\n:init engram_ram=on\n:load a.ckpt\n:step 1\n"
             ":show config\n", SMALL, corpus);
    expect_ok(script);
    expect_out("step 2 loss");
    expect_out("engram_ram       on");
    expect_out("rows staged per step [placement]\n");  // (not "[architecture]": QA, session 34)
    // the same step 2 as without the move
    char moved[256], *l = strstr(out, "step 2 loss");
    snprintf(moved, sizeof moved, "%.*s", (int)(strstr(l, " ms ") - l), l);
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:step 3\n", SMALL, corpus);
    expect_ok(script);
    expect_out(moved);
}

// :show model named kda_chunk as the chunk when seq is shorter (one chunk of seq bytes runs)
static void test_show_model_chunk(void **s) {
    (void)s;
    expect_ok(":set seq=32 batch=2 kda_chunk=64\n:init\n:show model\n:set kda_chunk=16\n:show model\n");
    expect_out("chunk 32 (kda_chunk=64 > seq)");
    expect_out("H=2 heads of 64, chunk 16\n");
}

// Options of the commands that rely on the generic check (sh_check_keys): one given twice is
// refused, never the first taken; an integer option's maximum is in its range (QA, session 36)
static void test_option_twice_and_maximum(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:train 5 eval_every=1 eval_every=2\n", SMALL, corpus);
    expect_error(script, "s.dm:5: error: :train: option 'eval_every' given twice");
    snprintf(script, sizeof script, "%s:data %s\n:init seed=1\n:train 3 stop_after=3 log_every=1\n", SMALL, corpus);
    expect_ok(script);
    expect_out("\nstep 2 loss ");
}

// A :set is all or nothing: one whose eval_frac re-split is refused (the held-out part shorter
// than a sequence) keeps none of its keys, lr included, in the model the exit's save then writes
// (QA mutation, session 38: with the rollback gone the refused lr=0.5 was live, saved, and -r
// showed it). A 400-byte corpus of random words: 10% held out is 40 B, 5% is 20 B < seq+1 = 33.
static void test_refused_set_keeps_nothing(void **s) {
    (void)s;
    static const char *words[] = {"dormouse", "tea", "hatter", "riddle", "march", "hare", "treacle", "well"};
    char text[401], script[1600];
    unsigned r = 38u;
    size_t n = 0;
    while (n < 400) {
        r = r * 1103515245u + 12345u;
        n += (size_t)snprintf(text + n, sizeof text - n, "%s%c", words[(r >> 16) % 8], (r >> 8) % 5 ? ' ' : '\n');
    }
    text[400] = 0;
    write_file("small.txt", text);
    assert_int_equal(file_size("small.txt"), 400);
    snprintf(script, sizeof script, ":session cf\n%s:data small.txt\n:init seed=4\n:set lr=0.5 eval_frac=0.05\n", SMALL);
    int rc = run(script, out, sizeof out, err_, sizeof err_);  // (the error, then the exit's save says its file)
    if (rc != 1 || !strstr(err_, "s.dm:6: error: data: held-out split of ")) print_error("rc=%d\n%s\n", rc, err_);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err_, "s.dm:6: error: data: held-out split of "));
    assert_non_null(strstr(err_, "\ndmsh: saved runs/cf/ckpt/step-0.ckpt\n"));
    assert_non_null(strstr(err_, " is 20 B, shorter than one sequence (seq+1 = 33 B)"));
    assert_int_equal(sh_in_dir("%s --norc -r runs/cf -e ':show config' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    expect_out("\n  lr               0.003 ");
    expect_out("\n  eval_frac        0.1 ");
    assert_null(strstr(out, "0.5 "));
    assert_null(strstr(out, "0.05 "));
}

// :init's twice-given check compares whole keys: lr after lr_muon is another key (QA mutation,
// session 38: compared without its '=', "lr_muon=" began with "lr" and the :init was refused)
static void test_init_key_that_begins_another(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, "%s:data %s\n:init seed=2 lr_muon=0.03 lr=0.007 wd=0.05\n:show config\n", SMALL, corpus);
    expect_ok(script);
    expect_out("\n  lr_muon          0.03 ");
    expect_out("\n  lr               0.007 ");
    expect_out("\n  wd               0.05 ");
}

// an :init whose words pass validation but whose model is refused by the build (more memory than
// the host has) keeps the live model and its config: the model it would have replaced goes on
// training, and the session resumes it (QA mutation, session 38 ST9: with the config not restored,
// the exit save wrote the huge engram_rows into the checkpoint of the small model: a 48 GB
// allocation at exit, "out of memory")
static void test_init_refused_by_build_keeps_config(void **s) {
    (void)s;
    char script[1600];
    snprintf(script, sizeof script, ":session ib\n%s:data %s\n:init seed=1\n:step 2\n:init engram_rows=2000000000 engram_dim=64 seed=5\n",
             SMALL, corpus);
    int rc = run(script, out, sizeof out, err_, sizeof err_);
    if (rc != 1 || !strstr(err_, "s.dm:7: error: this model needs about ") || strstr(err_, "out of memory"))
        print_error("rc=%d\n%s\n", rc, err_);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err_, "s.dm:7: error: this model needs about "));
    assert_null(strstr(err_, "out of memory"));  // (the exit save of the live model)
    assert_int_equal(sh_in_dir("%s --norc -r runs/ib -e ':show config' -e ':step 1' > out.txt 2> err.txt", dmsh), 0);
    slurp_to("out.txt", out, sizeof out);
    expect_out("resumed runs/ib at step 2 ");
    expect_out("\n  engram_rows      257 ");
    expect_out("\n  engram_dim       8 ");
    expect_out("\n  seed             1 ");
    expect_out("\nstep 2 loss ");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_key),
        cmocka_unit_test(test_set_notes),
        cmocka_unit_test(test_set_notes_arms_and_schedule),
        cmocka_unit_test(test_first_horizon_after_steps),
        cmocka_unit_test(test_steps_to_and_from_zero_said),
        cmocka_unit_test(test_decay_that_flips),
        cmocka_unit_test(test_preset_line),
        cmocka_unit_test(test_engram_ram_route),
        cmocka_unit_test(test_show_model_chunk),
        cmocka_unit_test(test_option_twice_and_maximum),
        cmocka_unit_test(test_refused_set_keeps_nothing),
        cmocka_unit_test(test_init_key_that_begins_another),
        cmocka_unit_test(test_init_refused_by_build_keeps_config),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
