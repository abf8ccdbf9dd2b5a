import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// A video of every game (SPEC §14), for real: nginx with its RTMP
    /// module, ffmpeg pushing a red camera 1 and a blue camera 2 of m1,
    /// `claw-gateway run` recording both and `claw-gateway simulate` playing
    /// the PC. A game is played; its clips are served with Range requests,
    /// last as long as the game and its pads, and show their own camera; a
    /// camera whose stream was cut has no clip of the next game, and says
    /// why; a clip of another machine, camera or a path with `..` is a 404;
    /// an operator holds a game's clips.
    @Suite(.serialized) struct EvidenceEndToEndTests {
        static let token = "evidence-admin-token"
        static let admin = [("Authorization", "Bearer \(token)")]

        @Test func everyGameHasAClipOfEachCameraThatWasRecording() async throws {
            let rtmp = try RTMPServer()
            try rtmp.start()
            defer { rtmp.stop() }
            try rtmp.startCamera("m1-1", colour: "red")
            try rtmp.startCamera("m1-2", colour: "blue")
            let site = try await E2ESite(
                adminToken: Self.token, logLevel: "info",
                simulatorArguments: ["--ack-delay", "0s", "--result-delay", "1s", "--win-rate", "1"], machines: ["m1"],
                extra: "evidence:\n  dir: evidence\n  pad: 1s\n", cameraBase: rtmp.base)
            do {
                try await run(site, rtmp)
            } catch {
                print("gateway log:\n\(site.site.logText.suffix(5000))")
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func recording(_ site: E2ESite, camera: String) async -> Bool {
            let text = (try? await HTTP.get("\(site.base)/metrics").body) ?? ""
            return text.contains(#"claw_evidence_recording_up{machine="m1",camera="\#(camera)"} 1"#)
        }

        /// Plays one game on m1 as `player`: join, accept, a move, grab; returns its session once it ended.
        private func play(_ site: E2ESite, _ player: String) async throws -> String {
            try await site.generic(from: player, to: "m1", #"{"command":6}"#)
            let session = try await site.currentSession()
            try await site.generic(from: player, to: "m1", #"{"command":12,"data":"\#(session)"}"#)
            try await eventually("the game to start") {
                ((try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["state"] as? String) == "playing"
            }
            try await Task.sleep(for: .seconds(2))  // the player steers for a while: the clip's length
            try await site.generic(from: player, to: "m1", #"{"command":2,"serial":1}"#)
            return session
        }

        /// The game's record once its clips are cut (or known missing).
        private func record(_ site: E2ESite, _ session: String) async throws -> [String: Any] {
            var found: [String: Any]?
            try await eventually("the clips of \(session) in its record", timeout: .seconds(30)) {
                let games = (try? await HTTP.get("\(site.base)/v1/machines/m1/games"))?.json["games"] as? [[String: Any]] ?? []
                found = games.first { $0["id"] as? String == session && ($0["evidence"] != nil || $0["evidence_missing"] != nil) }
                return found != nil
            }
            return found ?? [:]
        }

        private func run(_ site: E2ESite, _ rtmp: RTMPServer) async throws {
            try await eventually("both cameras recording", timeout: .seconds(30)) {
                let one = await recording(site, camera: "1")
                let two = await recording(site, camera: "2")
                return one && two
            }
            let session = try await play(site, "ann")
            let game = try await record(site, session)
            let clips = game["evidence"] as? [[String: Any]] ?? []
            #expect(clips.compactMap { $0["camera"] as? String } == ["1", "2"], "\(game)")
            let started = try #require((game["started_at"] as? String).flatMap(Timestamp.date))
            let ended = try #require((game["ended_at"] as? String).flatMap(Timestamp.date))
            let expected = ended.timeIntervalSince(started) + 2  // a pad of 1 s on each side

            let folder = try TemporaryDirectory.make(prefix: "clips")
            defer { try? FileManager.default.removeItem(at: folder) }
            for (camera, colour) in [("1", "red"), ("2", "blue")] {
                let url = "\(site.base)/v1/machines/m1/games/\(session)/evidence/\(camera)"
                let whole = try await HTTP.bytes(url)
                #expect(whole.status == 200 && whole.headers["content-type"] == "video/mp4" && whole.headers["accept-ranges"] == "bytes")
                let file = folder.appendingPathComponent("\(camera).mp4")
                try Data(whole.body).write(to: file)
                let duration = try RTMPServer.duration(of: file)
                #expect(abs(duration - expected) < 2, "camera \(camera): a clip of \(duration) s for a game of \(expected) s with its pads")
                let recorded = (clips.first { $0["camera"] as? String == camera }?["duration_s"] as? Double) ?? -1
                #expect(abs(recorded - duration) < 0.1, "the record says \(recorded) s")
                let rgb = try RTMPServer.colour(of: file)
                let isRed = rgb.count == 3 && rgb[0] > 180 && rgb[1] < 80 && rgb[2] < 80
                let isBlue = rgb.count == 3 && rgb[2] > 180 && rgb[0] < 80 && rgb[1] < 80
                #expect(colour == "red" ? isRed : isBlue, "camera \(camera) shows \(rgb)")
                // A browser's <video> seeks with Range.
                let part = try await HTTP.bytes(url, headers: [("Range", "bytes=100-199")])
                #expect(part.status == 206 && part.body == Array(whole.body[100...199]))
                #expect(part.headers["content-range"] == "bytes 100-199/\(whole.body.count)")
                let tail = try await HTTP.bytes(url, headers: [("Range", "bytes=-10")])
                #expect(tail.status == 206 && tail.body == Array(whole.body.suffix(10)))
                #expect(try await HTTP.bytes(url, headers: [("Range", "bytes=999999999-")]).status == 416)
            }
            // Nothing else is served.
            for path in [
                "/v1/machines/m2/games/\(session)/evidence/1", "/v1/machines/m1/games/\(session)/evidence/3",
                "/v1/machines/m1/games/..%2F..%2Fdata%2Fgateway.sqlite/evidence/1", "/v1/machines/m1/games/\(session)/evidence/..%2F1",
                "/v1/machines/m1/games/nope/evidence/1",
            ] {
                let answer = try await HTTP.get("\(site.base)\(path)")
                #expect(answer.status == 404, "\(path): \(answer.status) \(answer.body)")
            }

            // An operator holds the game's clips for a dispute.
            let hold = "\(site.base)/v1/machines/m1/games/\(session)/evidence/hold"
            #expect(try await HTTP.request(.POST, hold, body: Array(#"{"hold":true,"reason":"x"}"#.utf8)).status == 401)
            let unreasoned = try await HTTP.request(.POST, hold, headers: Self.admin, body: Array(#"{"hold":true}"#.utf8))
            #expect(unreasoned.status == 422 && unreasoned.json["code"] as? String == "invalid_body")
            let held = try await HTTP.request(.POST, hold, headers: Self.admin, body: Array(#"{"hold":true,"reason":"ticket 42"}"#.utf8))
            #expect(held.status == 200 && held.json["clips"] as? Int == 2, "\(held.body)")

            // The dashboard lists the game's clips and plays one in the real browser.
            try await WebDriver.with { page in
                try await page.navigate("\(site.base)/dashboard")
                let buttons = "section.machine[data-machine=\"m1\"] .results li[data-game=\"\(session)\"] button.clip"
                try await page.waitFor("the game's two clips listed", timeout: .seconds(20)) {
                    try await page.texts(buttons) == ["▶ 1", "▶ 2"]
                }
                try await page.click(try await page.find(buttons))
                try await page.waitFor("camera 1's clip to play in the page", timeout: .seconds(20)) {
                    let state = try await page.execute(
                        "const v = document.querySelector('video.clip-player'); return v ? [v.readyState, v.videoWidth, v.duration, v.dataset.camera] : null")
                    guard case .array(let values) = state, values.count == 4, case .number(let ready) = values[0],
                        case .number(let width) = values[1], case .number(let length) = values[2]
                    else { return false }
                    return ready >= 2 && width == 160 && abs(length - expected) < 2 && values[3] == .string("1")
                }
            }

            // Camera 2's stream cut: the next game has no clip of it, and says why.
            rtmp.stopCamera("m1-2")
            try await eventually("camera 2's recording down", timeout: .seconds(40)) { await !recording(site, camera: "2") }
            let second = try await play(site, "bob")
            let next = try await record(site, second)
            #expect((next["evidence"] as? [[String: Any]])?.compactMap { $0["camera"] as? String } == ["1"], "\(next)")
            let missing = next["evidence_missing"] as? [[String: Any]] ?? []
            #expect(missing.count == 1 && missing.first?["camera"] as? String == "2", "\(next)")
            #expect((missing.first?["reason"] as? String)?.contains("down") == true, "\(missing)")
            let gone = try await HTTP.get("\(site.base)/v1/machines/m1/games/\(second)/evidence/2")
            #expect(gone.status == 404 && gone.json["code"] as? String == "no_clip")

            // kill -9 takes no ffmpeg with it; the next start stops the one it left.
            let ring = site.site.directory.appendingPathComponent("evidence/.ring/m1/1").path
            let before = Self.recorders(of: ring)
            #expect(before.count == 1, "\(before)")
            site.killGateway()
            try await Task.sleep(for: .milliseconds(500))
            #expect(Self.recorders(of: ring) == before, "the killed gateway's ffmpeg still records")
            try site.startGateway()
            try await eventually("one ffmpeg recording camera 1, the new gateway's", timeout: .seconds(30)) {
                let now = Self.recorders(of: ring)
                return now.count == 1 && now != before
            }
            // A graceful stop ends its ffmpegs, though the cameras still stream.
            await site.stopGateway()
            try await eventually("no ffmpeg recording after the gateway stopped") { Self.recorders(of: ring).isEmpty }
        }

        /// The pids of the ffmpegs writing into `ring`.
        static func recorders(of ring: String) -> [Int32] {
            let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            return pids.compactMap(Int32.init).filter { pid in
                guard let command = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8),
                    let status = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), !status.contains(") Z ")
                else { return false }
                return command.contains("ffmpeg") && command.contains(ring)
            }.sorted()
        }
    }
}
