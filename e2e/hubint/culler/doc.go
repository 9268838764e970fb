// Package culler holds the Hub integration tests of gpu-culler's side of the Hub (build tag integration; make
// integration runs them once per Hub line, JupyterHub 5.5 and 6.x), with a real JupyterHub and
// configurable-http-proxy and local single-user servers (SimpleLocalProcessSpawner):
//
//   - the Hub token the chart gives gpu-culler, with exactly its scopes (list:users, read:users:activity,
//     read:servers, delete:servers), lists the ready servers page by page, reads their activity and stops one,
//     and can do nothing else the tests try (start a server, see groups);
//   - the chart's Hub glue (chart/gpuhub/files/gpuhub_hub_config.py, loaded unchanged) makes the Hub home page say
//     why the culler stopped a server, asking gpu-culler's api/v1/stops/{user} with gpu-culler's own token; when
//     gpu-culler is slow, failing or down the page still renders, at once, without it, and the Hub logs it once;
//   - that part of the glue on its own (glue_test.py, TestGlueUnit), against a fake gpu-culler.
//
// gpu-culler itself is played by a fixture server in the test (its stops endpoint, C3 of issue 12): what is under
// test is the real Hub and the glue. TODO(lead): once services/gpu-culler exists, run the real binary against this
// Hub too (GPUHUB_CULLER_BIN, as hubint/quota runs gpu-quota): its start-up scope check and a stop it records,
// then shown on the home page.
package culler
