/// The client of a chain service (router, recorder) on the chain's cluster:
/// every node of `bus:`, MQTT 3.1.1 (what a NATS cluster speaks), a
/// keepalive that leaves a dead node within seconds, reconnecting after 1 s
/// up to 10 s, the next node after a failed one.
extension MQTTClientConfiguration {
    /// - Parameters:
    ///   - cleanSession: false: the cluster keeps the service's subscriptions
    ///     and QoS 1 messages for it while it is away, under its client id.
    ///   - maxInboundPayload: larger messages are dropped unread (the cluster
    ///     refuses more than 1 MB anyway).
    init(bus: BusSettings, cleanSession: Bool, maxInboundPayload: Int) {
        let first = bus.urls[0]
        self.init(host: first.host, port: first.port, clientID: bus.clientID)
        alternates = bus.urls.dropFirst().map { MQTTBrokerAddress(host: $0.host, port: $0.port) }
        username = bus.username
        password = bus.password
        tls = bus.tls
        protocolVersion = .v311
        self.cleanSession = cleanSession
        keepalive = 5
        reconnectDelay = 1...10
        self.maxInboundPayload = maxInboundPayload
    }
}
