/// Writes flat JSON objects of strings and integers, such as the generic
/// webhook's `{"from","to","attach"}`, NetEase's message copy and the
/// ingress's answers: keys in the order given, escaped as RFC 8259 requires.
public enum JSONObjectWriter {
    /// A value of a flat object.
    public enum Value: Sendable, Equatable, ExpressibleByStringLiteral {
        case string(String)
        case integer(Int64)

        public init(stringLiteral value: String) {
            self = .string(value)
        }
    }

    public static func object(_ fields: KeyValuePairs<String, String>) -> [UInt8] {
        object(fields.map { ($0.key, Value.string($0.value)) })
    }

    public static func object(_ fields: [(String, Value)]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(64 + fields.count * 24)
        for (index, (key, value)) in fields.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONText.appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            switch value {
            case .string(let text): JSONText.appendString(text, to: &out)
            case .integer(let number): JSONText.appendInteger(number, to: &out)
            }
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}
