import CoreMetrics
import Prometheus

/// `/metrics`: what was recorded through swift-metrics, plus gauges read from
/// the machines and the MQTT client at scrape time.
enum MetricsExport {
    static func text(registry: PrometheusCollectorRegistry, arcade: Arcade, mqtt: MQTTClient) -> String {
        for machine in arcade.machines {
            let snapshot = machine.currentSnapshot()
            CoreMetrics.Gauge(label: "claw_queue_length", dimensions: [("machine", machine.id)]).record(snapshot.length)
            CoreMetrics.Gauge(label: "claw_machine_online", dimensions: [("machine", machine.id)]).record(snapshot.online ? 1 : 0)
        }
        CoreMetrics.Gauge(label: "claw_mqtt_connected").record(mqtt.isConnected ? 1 : 0)
        CoreMetrics.Gauge(label: "claw_mqtt_connects").record(mqtt.connectCount)
        CoreMetrics.Gauge(label: "claw_mqtt_messages_oversized").record(mqtt.oversizedMessages)
        CoreMetrics.Gauge(label: "claw_storage_writable").record(arcade.writer.isWritable ? 1 : 0)
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}
