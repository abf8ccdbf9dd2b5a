import Prometheus

/// `/metrics`: the process-wide registry, with the gauges that are read
/// from the machines and the MQTT client brought up to date first.
enum MetricsExport {
    static func text(arcade: Arcade, mqtt: MQTTClient) -> String {
        for machine in arcade.machines { machine.exportGauges() }
        GatewayMetrics.mqttConnected.set(to: mqtt.isConnected ? 1 : 0)
        GatewayMetrics.mqttConnects.sync(to: mqtt.connectCount)
        GatewayMetrics.mqttOversized.sync(to: mqtt.oversizedMessages)
        GatewayMetrics.storageWritable.set(to: arcade.writer.isWritable ? 1 : 0)
        var buffer: [UInt8] = []
        GatewayMetrics.registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}
