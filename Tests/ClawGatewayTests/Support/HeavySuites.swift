import Testing

/// Suites that start processes (brokers, clusters, gateways, simulators,
/// browsers) or burn CPU (fuzzing) run in one of three lanes, one test at a
/// time in each: on a 2-core machine, several gateways and a fuzzer at once
/// starve each other and time out for no fault of the code, but a few fit
/// when the others mostly wait. Pure unit suites still run in parallel
/// beside them.
///
/// This lane: a site's processes (mosquitto, gateways, simulators, the fake
/// NetEase API), the real browser, and the fuzzers.
@Suite(.serialized) enum HeavySuites {}

/// The second: the chain's three-node NATS cluster, with the sites,
/// routers and recorders on it. Its tests mostly wait for elections,
/// outages and resends, which leaves the CPU to the first lane.
@Suite(.serialized) enum ChainSuites {}

/// The third: what waits on PostgreSQL (the recorder and the router against
/// mosquitto and PostgreSQL, the chain's records, the history page). The
/// three lanes take about as long each; two were four and a half minutes.
@Suite(.serialized) enum DatabaseSuites {}
