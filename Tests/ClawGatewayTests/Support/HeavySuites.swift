import Testing

/// Suites that start processes (brokers, clusters, gateways, simulators,
/// browsers) or burn CPU (fuzzing) run in one of two lanes, one test at a
/// time in each: on a 2-core machine, several gateways and a fuzzer at once
/// starve each other and time out for no fault of the code, but two tests
/// fit when one of them mostly waits. Pure unit suites still run in
/// parallel beside them.
///
/// This lane: a site's processes (mosquitto, gateways, simulators, the fake
/// NetEase API), the recorder and router against mosquitto and PostgreSQL,
/// the real browser, and the fuzzers.
@Suite(.serialized) enum HeavySuites {}

/// The other lane: the chain's three-node NATS cluster, with the sites,
/// routers and recorders on it. Its tests mostly wait for elections,
/// outages and resends, which leaves the CPU to the first lane.
@Suite(.serialized) enum ChainSuites {}
