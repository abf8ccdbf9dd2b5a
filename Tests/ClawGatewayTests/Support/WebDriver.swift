import Foundation
import NIOHTTP1
import Testing

/// A real browser for the tests: Debian's `chromium`, headless, driven by
/// `chromedriver` over the W3C WebDriver protocol (plain JSON over HTTP,
/// what Selenium speaks), so a test can load the dashboard, read its DOM,
/// click and type while it also restarts the gateway and reads MQTT.
///
/// There is no fallback: without chromium and chromium-driver the test fails
/// and says how to install them.
final class WebDriver {
    static let chromium = "/usr/bin/chromium"
    static let chromedriver = "/usr/bin/chromedriver"
    /// The key a web element's id goes under, in requests and answers (W3C).
    static let elementKey = "element-6066-11e4-a52e-4f735466cecf"

    /// A web element of the current page, by its WebDriver id.
    struct Element: Sendable, Hashable {
        let id: String
        var json: JSON { .object([WebDriver.elementKey: .string(id)]) }
    }

    let port: Int
    let directory: URL
    private(set) var sessionID = ""
    private var driver: ChildProcess?

    private var base: String { "http://127.0.0.1:\(port)" }
    private var session: String { "\(base)/session/\(sessionID)" }

    /// Starts chromedriver and opens a session: a fresh profile, a viewport of `width` × `height` CSS pixels.
    static func start(width: Int = 1400, height: Int = 1000) async throws -> WebDriver {
        for tool in [chromium, chromedriver] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw WebDriverError("\(tool) is missing, and the dashboard tests need a real browser: run ./scripts/test, which installs chromium and chromium-driver")
        }
        let driver = try WebDriver()
        do {
            try await driver.open(width: width, height: height)
        } catch {
            await driver.stop()
            throw error
        }
        return driver
    }

    /// Runs `body` with a new browser and closes it afterwards, also when `body` throws.
    static func with(width: Int = 1400, height: Int = 1000, _ body: (WebDriver) async throws -> Void) async throws {
        let driver = try await start(width: width, height: height)
        do {
            try await body(driver)
        } catch {
            await driver.stop()
            throw error
        }
        await driver.stop()
    }

    private init() throws {
        port = try FreePort.next()
        directory = try TemporaryDirectory.make(prefix: "chromium")
        driver = try ChildProcess(
            Self.chromedriver, ["--port=\(port)"], output: directory.appendingPathComponent("chromedriver.log"))
    }

    private func open(width: Int, height: Int) async throws {
        guard FreePort.waitUntilListening(port, timeout: 20) else {
            throw WebDriverError("chromedriver did not start listening on port \(port). Its log:\n\(log)")
        }
        try await waitFor("chromedriver to be ready", timeout: .seconds(20), recordIssue: false) {
            try await self.call(.GET, "\(self.base)/status")["ready"] == .bool(true)
        }
        let profile = directory.appendingPathComponent("profile")
        let options: JSON = .object([
            "binary": .string(Self.chromium),
            "args": .array(
                [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=\(width),\(height)",
                    "--user-data-dir=\(profile.path)",
                ].map(JSON.string)),
        ])
        let capabilities: JSON = .object([
            "capabilities": .object(["alwaysMatch": .object(["browserName": .string("chrome"), "goog:chromeOptions": options])])
        ])
        let created = try await call(.POST, "\(base)/session", capabilities, timeout: .seconds(60))
        guard let id = created["sessionId"]?.string else { throw WebDriverError("no session in \(created)") }
        sessionID = id
        // --window-size sizes the window; the page gets what is left of it. Grow it by the difference.
        let inner = try await execute("return [window.innerWidth, window.innerHeight]").array?.compactMap(\.number) ?? []
        if inner.count == 2, inner != [Double(width), Double(height)] {
            let rect = try await call(.GET, "\(session)/window/rect")
            let outerWidth = (rect["width"]?.number ?? Double(width)) + Double(width) - inner[0]
            let outerHeight = (rect["height"]?.number ?? Double(height)) + Double(height) - inner[1]
            _ = try await call(.POST, "\(session)/window/rect", .object(["width": .number(outerWidth), "height": .number(outerHeight)]))
        }
    }

    /// Closes the session (chromium quits), then ends chromedriver and anything of chromium's still running.
    func stop() async {
        guard let driver else { return }
        self.driver = nil
        let children = Self.descendants(of: driver.pid)
        if !sessionID.isEmpty { _ = try? await call(.DELETE, session, timeout: .seconds(10)) }
        driver.signal(SIGTERM)
        if await driver.wait(timeout: 5) == nil {
            driver.signal(SIGKILL)
            driver.wait()
        }
        // chromium's processes whose browser was killed rather than closed: by pid, only those started here.
        for pid in children where Self.isChromium(pid) { kill(pid, SIGKILL) }
        try? FileManager.default.removeItem(at: directory)
    }

    var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("chromedriver.log"), encoding: .utf8)) ?? ""
    }

    // MARK: Commands

    func navigate(_ url: String) async throws {
        _ = try await call(.POST, "\(session)/url", .object(["url": .string(url)]), timeout: .seconds(30))
    }

    /// The first element matching `css`; throws when there is none.
    func find(_ css: String) async throws -> Element {
        let found = try await call(.POST, "\(session)/element", Self.locator(css))
        guard let id = found[Self.elementKey]?.string else { throw WebDriverError("no element in \(found)") }
        return Element(id: id)
    }

    /// Every element matching `css`, in document order; none is no error.
    func findAll(_ css: String) async throws -> [Element] {
        let found = try await call(.POST, "\(session)/elements", Self.locator(css))
        return (found.array ?? []).compactMap { $0[Self.elementKey]?.string }.map(Element.init)
    }

    /// The element's rendered text, as a user sees it.
    func text(of element: Element) async throws -> String {
        try await call(.GET, "\(session)/element/\(element.id)/text").string ?? ""
    }

    func click(_ element: Element) async throws {
        _ = try await call(.POST, "\(session)/element/\(element.id)/click", .object([:]))
    }

    func clear(_ element: Element) async throws {
        _ = try await call(.POST, "\(session)/element/\(element.id)/clear", .object([:]))
    }

    /// Types `keys` into `element`, key by key, as a user would.
    func sendKeys(_ keys: String, to element: Element) async throws {
        _ = try await call(.POST, "\(session)/element/\(element.id)/value", .object(["text": .string(keys)]))
    }

    /// Runs `script` as the body of a function in the page (`arguments[i]` are `args`) and returns what it returns.
    @discardableResult
    func execute(_ script: String, _ args: [JSON] = []) async throws -> JSON {
        try await call(.POST, "\(session)/execute/sync", .object(["script": .string(script), "args": .array(args)]))
    }

    /// The `textContent` of every element matching `css`, in document order: exactly what the page put in.
    func texts(_ css: String) async throws -> [String] {
        let found = try await execute("return Array.from(document.querySelectorAll(arguments[0]), (node) => node.textContent)", [.string(css)])
        return (found.array ?? []).compactMap(\.string)
    }

    /// The viewport as a PNG.
    func screenshot() async throws -> Data {
        let encoded = try await call(.GET, "\(session)/screenshot", timeout: .seconds(30)).string ?? ""
        guard let png = Data(base64Encoded: encoded) else { throw WebDriverError("the screenshot was not base64") }
        return png
    }

    /// Polls `condition` until it holds or `timeout` passes; then fails the
    /// test with `what` and the page's text. An error thrown by the condition
    /// (an element re-rendered meanwhile) counts as not yet.
    func waitFor(
        _ what: String, timeout: Duration = .seconds(10), recordIssue: Bool = true, sourceLocation: SourceLocation = #_sourceLocation,
        _ condition: () async throws -> Bool
    ) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var lastError: (any Error)?
        while true {
            do {
                if try await condition() { return }
                lastError = nil
            } catch {
                lastError = error
            }
            if clock.now >= deadline { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        var message = "timed out waiting for \(what)"
        if let lastError { message += " (last error: \(lastError))" }
        if recordIssue, !sessionID.isEmpty, let page = try? await execute("return document.body ? document.body.innerText : ''").string {
            message += "\nThe page said:\n\(page)"
        }
        if recordIssue { Issue.record("\(message)", sourceLocation: sourceLocation) }
        throw TimedOut(description: message)
    }

    // MARK: The protocol

    private static func locator(_ css: String) -> JSON {
        .object(["using": .string("css selector"), "value": .string(css)])
    }

    /// One WebDriver command: its answer's `value`, or the error it reports, thrown.
    private func call(_ method: HTTPMethod, _ url: String, _ body: JSON? = nil, timeout: Duration = .seconds(15)) async throws -> JSON {
        let bytes = try body.map { Array(try JSONEncoder().encode($0)) }
        let answer = try await HTTP.request(
            method, url, headers: bytes == nil ? [] : [("Content-Type", "application/json; charset=utf-8")], body: bytes, timeout: timeout)
        guard let json = try? JSONDecoder().decode(JSON.self, from: Data(answer.body.utf8)) else {
            throw WebDriverError("\(method) \(url): HTTP \(answer.status), not JSON: \(answer.body.prefix(500))")
        }
        let value = json["value"] ?? .null
        guard answer.status == 200 else {
            let error = value["error"]?.string ?? "HTTP \(answer.status)"
            let message = value["message"]?.string ?? ""
            throw WebDriverError("\(method) \(url.replacingOccurrences(of: base, with: "")): \(error): \(message.prefix(500))")
        }
        return value
    }

    // MARK: Processes

    /// Every process below `root`, from /proc (chromedriver → chromium → its zygotes → renderers).
    private static func descendants(of root: pid_t) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        var children: [pid_t: [pid_t]] = [:]
        for entry in entries {
            guard let pid = pid_t(entry), let parent = parent(of: pid) else { continue }
            children[parent, default: []].append(pid)
        }
        var found: [pid_t] = []
        var next = [root]
        while let pid = next.popLast() {
            for child in children[pid] ?? [] {
                found.append(child)
                next.append(child)
            }
        }
        return found
    }

    private static func parent(of pid: pid_t) -> pid_t? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return nil }
        // "pid (comm) state ppid …": comm may hold spaces and parentheses.
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        return fields.count > 1 ? pid_t(fields[1]) : nil
    }

    private static func isChromium(_ pid: pid_t) -> Bool {
        guard let command = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline")) else { return false }
        return String(decoding: command, as: UTF8.self).contains("chromium")
    }
}

extension WebDriver {
    /// A JSON value as WebDriver sends and takes it.
    enum JSON: Codable, Sendable, Equatable, CustomStringConvertible {
        case null
        case bool(Bool)
        case number(Double)
        case string(String)
        case array([JSON])
        case object([String: JSON])

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() {
                self = .null
            } else if let value = try? container.decode(Bool.self) {
                self = .bool(value)
            } else if let value = try? container.decode(Double.self) {
                self = .number(value)
            } else if let value = try? container.decode(String.self) {
                self = .string(value)
            } else if let value = try? container.decode([JSON].self) {
                self = .array(value)
            } else {
                self = .object(try container.decode([String: JSON].self))
            }
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .null: try container.encodeNil()
            case .bool(let value): try container.encode(value)
            case .number(let value): try container.encode(value)
            case .string(let value): try container.encode(value)
            case .array(let value): try container.encode(value)
            case .object(let value): try container.encode(value)
            }
        }

        var string: String? { if case .string(let value) = self { value } else { nil } }
        var number: Double? { if case .number(let value) = self { value } else { nil } }
        var bool: Bool? { if case .bool(let value) = self { value } else { nil } }
        var array: [JSON]? { if case .array(let value) = self { value } else { nil } }
        subscript(key: String) -> JSON? { if case .object(let value) = self { value[key] } else { nil } }

        var description: String {
            (try? JSONEncoder().encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "?"
        }
    }
}

struct WebDriverError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
