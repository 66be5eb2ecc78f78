/* test_util.c — unit tests of src/util: error messages, checked allocation, path helpers. */
#include "test.h"
#include "util/util.h"

#include <stdint.h>
#include <stdlib.h>

TEST(util_error_message_is_kept) {
    gp_status s = gp_set_error(GP_ERR_FORMAT, "%s: field '%s' bad", "config.json", "hidden_size");
    CHECK_EQ_INT(s, GP_ERR_FORMAT);
    CHECK_STR(gp_errmsg(), "config.json: field 'hidden_size' bad");
    CHECK_STR(gp_status_str(GP_ERR_FORMAT), "GP_ERR_FORMAT");
}

TEST(util_malloc_overflow_is_refused) {
    void *p = gp_malloc(SIZE_MAX / 2, 4);
    CHECK(p == NULL);
    CHECK(strstr(gp_errmsg(), "overflows") != NULL);
    char *j = gp_path_join("a/b", "c.json");
    CHECK_STR(j, "a/b/c.json");
    free(j);
}
