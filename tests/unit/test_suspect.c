/* test_suspect.c — the suspect-line heuristics of the steering validation harness, case by case. */
#include "genparity.h"
#include "test.h"

#include <string.h>

static uint32_t f(const char *s) { return gp_text_suspect(s, strlen(s)); }

TEST(suspect_heuristics) {
    CHECK_EQ_INT(f("ROMEO: But soft, what light through yonder window breaks?"), 0);
    CHECK_EQ_INT(f("In 1597, for 20 shillings (or so), he sold it."), 0);
    CHECK_EQ_INT(f("the number 31415926535 appears"), GP_SUSPECT_DIGIT_RUN);
    CHECK_EQ_INT(f("so \\frac12 of it"), GP_SUSPECT_LATEX);
    CHECK_EQ_INT(f("\\alpha and \\beta"), GP_SUSPECT_LATEX);
    CHECK_EQ_INT(f("x^{2}"), GP_SUSPECT_LATEX);
    CHECK_EQ_INT(f("a \\n escape is fine"), 0);
    CHECK_EQ_INT(f("close ) before open"), GP_SUSPECT_BRACES);
    CHECK_EQ_INT(f("{{ left open"), GP_SUSPECT_BRACES);
    CHECK_EQ_INT(f("bell \a here"), GP_SUSPECT_NONPRINT);
    CHECK_EQ_INT(f("bad \xff byte"), GP_SUSPECT_NONPRINT);
    CHECK_EQ_INT(f("replacement \xef\xbf\xbd char"), GP_SUSPECT_NONPRINT);
    CHECK_EQ_INT(f("caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 fine"), 0);
    CHECK_EQ_INT(f("the the the the end"), GP_SUSPECT_REPETITION);
    CHECK_EQ_INT(f("abababababababab"), GP_SUSPECT_REPETITION);
    CHECK_EQ_INT(f("------------ a rule is fine"), 0);
    CHECK_EQ_INT(f("I am I am I am I am I am I am a man"), GP_SUSPECT_REPETITION);
    CHECK_EQ_INT(f("\\begin{x} 12345678"), GP_SUSPECT_LATEX | GP_SUSPECT_DIGIT_RUN);
    CHECK_EQ_INT(gp_text_suspect(NULL, 0), 0);
}
