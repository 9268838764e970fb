package hubtest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUnittestFailures(t *testing.T) {
	tests := map[string]struct {
		out  string
		want string
	}{
		"a failure and an error": {
			out: `test_a (glue_test.T.test_a) ... ok
test_b (glue_test.T.test_b) ... FAIL
======================================================================
FAIL: test_b (glue_test.T.test_b)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "glue_test.py", line 9, in test_b
    self.assertLess(slowest, 3.2, "a form waited")
AssertionError: 4.02 not less than 3.2 : a form waited
======================================================================
ERROR: test_c (glue_test.T.test_c)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "gpuhub_hub_config.py", line 527, in refuse_unknown
    raise web.HTTPError(403)
tornado.web.HTTPError: HTTP 403: Forbidden
----------------------------------------------------------------------
Ran 3 tests in 1.0s

FAILED (failures=1, errors=1)
`,
			want: "FAIL: test_b (glue_test.T.test_b); AssertionError: 4.02 not less than 3.2 : a form waited; " +
				"ERROR: test_c (glue_test.T.test_c); tornado.web.HTTPError: HTTP 403: Forbidden",
		},
		"a crash before the tests": {
			out:  "Traceback (most recent call last):\nModuleNotFoundError: No module named 'gluekit'\n",
			want: "ModuleNotFoundError: No module named 'gluekit'",
		},
		"nothing to name": {out: "Segmentation fault\n", want: "no failed test named in its output"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, unittestFailures([]byte(tc.out))); diff != "" {
				t.Errorf("unittestFailures (-want +got):\n%s", diff)
			}
		})
	}
}
