// Package dbfaults holds the tests every database store on
// stores/casstore passes, which pgstore and mysqlstore share: the
// conformance suite through the production chain of decorators
// ([ConformanceThroughChain]), four processes on one key admitting no
// more than the bound ([NoOvergrantProcesses]), and the server killed
// behind a breaker in each mode ([BreakerModes]) and under load, then
// restarted ([KillRestart]).
//
// Each store's tests supply what differs: how to start a server of the
// test's own ([Server]) and how to open a store on it. The helpers know
// no driver, so the root module requires none; they fail the test through
// t, and mark themselves with t.Helper.
package dbfaults
