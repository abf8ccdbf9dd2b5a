import Testing

/// Suites that start processes (brokers, gateways, simulators) or burn CPU
/// (fuzzing) run inside this one, one test at a time: on a 2-core machine,
/// several gateways and a fuzzer at once starve each other and time out for
/// no fault of the code. Pure unit suites still run in parallel.
@Suite(.serialized) enum HeavySuites {}
