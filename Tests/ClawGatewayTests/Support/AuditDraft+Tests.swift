@testable import ClawGateway

extension AuditDraft {
    /// An operator's change as a test makes it, without HTTP.
    static func byTest(_ action: AuditAction, target: String = "machine/m1", reason: String? = nil) -> AuditDraft {
        AuditDraft(operatorName: "tester", address: "127.0.0.1", action: action, target: target, reason: reason)
    }
}
