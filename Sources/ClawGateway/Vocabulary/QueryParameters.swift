import Hummingbird

/// How every route reads a query parameter.
enum QueryParameter {
    /// `text` (the parameter `name`) as an integer within `range`, or
    /// `value` when it is absent; else a 400 naming the parameter and its range.
    static func integer(_ text: Substring?, name: String, default value: Int, range: ClosedRange<Int>) throws(Refusal) -> Int {
        guard let text else { return value }
        guard let number = Int(text), range.contains(number) else {
            throw Refusal.badParameter(name, "must be an integer from \(range.lowerBound) to \(range.upperBound == Int.max ? "any" : String(range.upperBound))")
        }
        return number
    }
}

extension Request {
    /// The query parameter `name` as an integer (``QueryParameter/integer(_:name:default:range:)``).
    func integer(_ name: String, default value: Int, range: ClosedRange<Int>) throws(Refusal) -> Int {
        try QueryParameter.integer(uri.queryParameters[Substring(name)], name: name, default: value, range: range)
    }
}
