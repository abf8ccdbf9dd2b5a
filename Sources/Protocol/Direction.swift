/// The directions a move (command 1) may carry.
public enum Direction: String, Sendable, CaseIterable {
    case up, down, left, right, stop
}
