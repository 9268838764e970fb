// Package hubint holds integration tests of hubapi and hubauth against a real JupyterHub (build tag
// integration). make integration runs them once per supported Hub line (5.5 and 6.x), with
// GPUHUB_HUB_VENV naming the virtualenv of the Hub under test; each run starts one Hub in TestMain.
// Every service in the Hub holds only the scopes its test needs (load_roles), so a missing scope in
// hubapi's documentation or in a service's role shows up here as a 403.
package hubint
