import Foundation
import Testing

/// The arrows between the gateway's rooms that docs/ARCHITECTURE.md draws,
/// read off the sources: a room "uses" another when its code (comments left
/// out) names a type declared there.
@Suite struct RoomArrowsTests {
    /// The vocabulary every room may use uses nothing of theirs: only the
    /// protocol module and the config it is given.
    @Test func theVocabularyUsesNoRoomButConfig() throws {
        let rooms = try SourceRooms()
        let used = rooms.used(by: "Vocabulary").subtracting(["Config"])
        #expect(used.isEmpty, "Vocabulary/ names types of \(used.sorted()): move them into Vocabulary/ or the use out")
    }

    /// The chain's router and recorder are not machines: they use none of the machines' room.
    @Test func theRouterAndTheRecorderUseNothingOfTheMachines() throws {
        let rooms = try SourceRooms()
        for room in ["Chain/Router", "Chain/Recorder"] {
            let names = rooms.names(usedBy: room, from: "Machines")
            #expect(names.isEmpty, "\(room) names \(names.sorted()) of Machines/: give it a home in Vocabulary/")
        }
    }

    /// The reader is not fooled: the machines' room does use the vocabulary.
    @Test func theReaderSeesAUseWhereThereIsOne() throws {
        let rooms = try SourceRooms()
        #expect(rooms.names(usedBy: "Machines", from: "Vocabulary").contains("GameClock"))
        #expect(rooms.room(declaring: "PlayerAddress") == "Vocabulary")
    }
}

/// Sources/ClawGateway's rooms: the first folder (the second under Chain/),
/// the types each declares and the capitalised words each one's code uses.
private struct SourceRooms {
    private var declared: [String: String] = [:]
    private var words: [String: Set<String>] = [:]

    init() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources/ClawGateway")
        let files = try #require(FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil))
        let declaration = try Regex(#"(?m)^(?:public |private |fileprivate )?(?:final )?(?:struct|enum|class|protocol|actor|typealias)\s+(\w+)"#)
        let word = try Regex(#"\b[A-Z]\w+\b"#)
        let comment = try Regex(#"//[^\n]*"#)
        for case let file as URL in files where file.pathExtension == "swift" {
            let parts = file.path.dropFirst(root.path.count + 1).split(separator: "/").map(String.init)
            guard parts.count > 1 else { continue }
            let room = parts[0] == "Chain" && parts.count > 2 ? "Chain/\(parts[1])" : parts[0]
            let code = try String(contentsOf: file, encoding: .utf8).replacing(comment, with: "")
            for match in code.matches(of: declaration) {
                if let name = match.output[1].substring, declared[String(name)] == nil { declared[String(name)] = room }
            }
            words[room, default: []].formUnion(code.matches(of: word).map { String(code[$0.range]) })
        }
    }

    func room(declaring type: String) -> String? { declared[type] }

    /// The types of `other` that `room`'s code names.
    func names(usedBy room: String, from other: String) -> Set<String> {
        (words[room] ?? []).filter { declared[$0] == other }
    }

    /// The rooms whose types `room`'s code names.
    func used(by room: String) -> Set<String> {
        Set((words[room] ?? []).compactMap { declared[$0] }).subtracting([room])
    }
}
