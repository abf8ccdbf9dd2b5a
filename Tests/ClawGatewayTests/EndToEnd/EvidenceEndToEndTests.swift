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
    /// camera cut mid-game leaves a clip that stops there, and the game is
    /// not held up; a camera whose stream is gone has no clip of the next
    /// game, and says why; a clip of another machine, camera or a path with `..` is a 404;
    /// an operator holds a game's clips.
    @Suite(.serialized) struct EvidenceEndToEndTests {
        static let token = "evidence-admin-token"
        static let admin = [("Authorization", "Bearer \(token)")]

        @Test func everyGameHasAClipOfEachCameraThatWasRecording() async throws {
            try await Self.withCameras { site, rtmp in try await run(site, rtmp) }
        }

        /// SPEC §14: "a clip that cannot be cut within `evidence.cut_timeout`
        /// … is given up with its reason, so no record waits for it". The
        /// gateway's ffmpeg (first on its PATH only: `env PATH=…`) records
        /// as ffmpeg does but hangs when asked to cut a clip, as on a disk
        /// whose writes never return. With `cut_timeout: 2s` each camera's
        /// cut is given up, its process killed by its pid, and the game's
        /// record says why.
        @Test func aClipNotCutWithinCutTimeoutIsGivenUpWithItsReason() async throws {
            let tools = try TemporaryDirectory.make(prefix: "hung-ffmpeg")
            defer { try? FileManager.default.removeItem(at: tools) }
            let cutters = tools.appendingPathComponent("cutters")
            let ffmpeg = tools.appendingPathComponent("ffmpeg")
            try """
                #!/bin/sh
                for argument in "$@"; do
                  if [ "$argument" = concat ]; then echo $$ >> '\(cutters.path)'; exec sleep 600; fi
                done
                exec \(RTMPServer.tool("ffmpeg") ?? "/usr/bin/ffmpeg") "$@"

                """.write(to: ffmpeg, atomically: true, encoding: .utf8)
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: ffmpeg.path)
            let path = "\(tools.path):\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")"
            try await Self.withCameras(evidence: "min_free: 64MiB\ncut_timeout: 2s", launcher: { _ in ["/usr/bin/env", "PATH=\(path)"] }) { site, _ in
                try await eventually("both cameras recording", timeout: .seconds(30)) { await bothRecording(site) }
                let session = try await play(site, "ann")
                let game = try await record(site, session)
                #expect(game["outcome"] as? String == "won", "\(game)")
                #expect((game["evidence"] as? [[String: Any]] ?? []).isEmpty, "\(game)")
                let missing = game["evidence_missing"] as? [[String: Any]] ?? []
                #expect(missing.compactMap { $0["camera"] as? String } == ["1", "2"], "\(game)")
                #expect(
                    missing.allSatisfy { $0["reason"] as? String == "ffmpeg did not cut the clip within cut_timeout (2s): given up" }, "\(missing)")
                let pids = ((try? String(contentsOf: cutters, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { pid_t($0) }
                #expect(pids.count == 2, "one cutter a camera: \(pids)")
                try await eventually("the hung cutters killed by their pids") {
                    pids.allSatisfy { pid in
                        let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
                        return stat.isEmpty || stat.contains(") Z ")
                    }
                }
                let text = (try? await HTTP.get("\(site.base)/metrics", bearer: Self.readToken).body) ?? ""
                #expect(text.contains(#"claw_evidence_clips_total{result="failed"} 2"#) && text.contains("claw_evidence_pending 0"), "\(text)")
                #expect(site.site.logText.contains("did not finish within evidence.cut_timeout"))
            }
        }

        /// nginx-rtmp with m1's red camera 1 and blue camera 2, and a site
        /// recording them (evidence pad 1 s), for `body`; the gateway's log
        /// printed when it fails, everything stopped after.
        /// `evidence` adds keys to the section (one `key: value` a line):
        /// by default a `min_free` of 64 MiB, so that a test machine with
        /// less than the default 2 GiB free still records.
        /// Always with the read token `evidence:` needs (SPEC §11).
        static func withCameras(
            simulate: Bool = true, http: String = "", evidence: String = "min_free: 64MiB",
            launcher: @escaping (TestSite) -> [String] = { _ in [] },
            _ body: (E2ESite, RTMPServer) async throws -> Void
        ) async throws {
            let rtmp = try RTMPServer()
            try rtmp.start()
            defer { rtmp.stop() }
            try rtmp.startCamera("m1-1", colour: "red")
            try rtmp.startCamera("m1-2", colour: "blue")
            let site = try await E2ESite(
                simulate: simulate, adminToken: token, readToken: readToken, logLevel: "info", http: http,
                simulatorArguments: ["--ack-delay", "0s", "--result-delay", "1s", "--win-rate", "1"], machines: ["m1"],
                extra: "evidence:\n  dir: evidence\n  pad: 1s\n" + evidence.split(separator: "\n").map { "  \($0)\n" }.joined(),
                cameraBase: rtmp.base, launcher: launcher)
            do {
                try await body(site, rtmp)
            } catch {
                print("gateway log:\n\(site.site.logText.suffix(5000))")
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func recording(_ site: E2ESite, camera: String, headers: [(String, String)] = EvidenceEndToEndTests.reader) async -> Bool {
            let text = (try? await HTTP.request(.GET, "\(site.base)/metrics", headers: headers).body) ?? ""
            return text.contains(#"claw_evidence_recording_up{machine="m1",camera="\#(camera)"} 1"#)
        }

        private func bothRecording(_ site: E2ESite, headers: [(String, String)] = EvidenceEndToEndTests.reader) async -> Bool {
            let one = await recording(site, camera: "1", headers: headers)
            let two = await recording(site, camera: "2", headers: headers)
            return one && two
        }

        /// Plays one game on m1 as `player`: join, accept, a move, grab; returns its session once it ended.
        /// `during` runs once the game is playing, before the player steers.
        private func play(
            _ site: E2ESite, _ player: String, headers: [(String, String)] = EvidenceEndToEndTests.reader, during: () async throws -> Void = {}
        ) async throws -> String {
            try await site.generic(from: player, to: "m1", #"{"command":6}"#)
            let turn = try await HTTP.request(.GET, "\(site.base)/v1/machines/m1", headers: headers).json["player"] as? [String: Any]
            let session = try #require(turn?["session"] as? String, "m1 has no current turn")
            try await site.generic(from: player, to: "m1", #"{"command":12,"data":"\#(session)"}"#)
            try await eventually("the game to start") {
                ((try? await HTTP.request(.GET, "\(site.base)/v1/machines/m1", headers: headers))?.json["state"] as? String) == "playing"
            }
            try await during()
            try await Task.sleep(for: .seconds(2))  // the player steers for a while: the clip's length
            try await site.generic(from: player, to: "m1", #"{"command":2,"serial":1}"#)
            return session
        }

        /// The game's record once its clips are cut (or known missing).
        private func record(_ site: E2ESite, _ session: String, headers: [(String, String)] = EvidenceEndToEndTests.reader) async throws -> [String: Any] {
            var found: [String: Any]?
            try await eventually("the clips of \(session) in its record", timeout: .seconds(30)) {
                let games = (try? await HTTP.request(.GET, "\(site.base)/v1/machines/m1/games", headers: headers))?.json["games"] as? [[String: Any]] ?? []
                found = games.first { $0["id"] as? String == session && ($0["evidence"] != nil || $0["evidence_missing"] != nil) }
                return found != nil
            }
            return found ?? [:]
        }

        private func run(_ site: E2ESite, _ rtmp: RTMPServer) async throws {
            try await eventually("both cameras recording", timeout: .seconds(30)) { await bothRecording(site) }
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
                let whole = try await HTTP.bytes(url, headers: Self.reader)
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
                let part = try await HTTP.bytes(url, headers: Self.reader + [("Range", "bytes=100-199")])
                #expect(part.status == 206 && part.body == Array(whole.body[100...199]))
                #expect(part.headers["content-range"] == "bytes 100-199/\(whole.body.count)")
                let tail = try await HTTP.bytes(url, headers: Self.reader + [("Range", "bytes=-10")])
                #expect(tail.status == 206 && tail.body == Array(whole.body.suffix(10)))
                #expect(try await HTTP.bytes(url, headers: Self.reader + [("Range", "bytes=999999999-")]).status == 416)
                // A clip is never open: not without the token, whatever Host a script sends.
                #expect(try await HTTP.bytes(url, headers: [("Host", "127.0.0.1")]).status == 401)
            }
            // Nothing else is served.
            for path in [
                "/v1/machines/m2/games/\(session)/evidence/1", "/v1/machines/m1/games/\(session)/evidence/3",
                "/v1/machines/m1/games/..%2F..%2Fdata%2Fgateway.sqlite/evidence/1", "/v1/machines/m1/games/\(session)/evidence/..%2F1",
                "/v1/machines/m1/games/nope/evidence/1",
            ] {
                let answer = try await HTTP.get("\(site.base)\(path)", bearer: Self.readToken)
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
                // The read token in the tab, as the page keeps it once asked: the clip is fetched with it.
                _ = try await page.execute("sessionStorage.setItem('claw-read-token', '\(Self.readToken)')")
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
                // Labelled: which camera of which game.
                let label = try await page.execute("const p = document.querySelector('.clip-label'); return p ? p.textContent : null")
                #expect(label.string?.hasPrefix("Camera 1 of game ") == true, "\(label)")
            }

            // Camera 2's stream cut mid-game: the game plays on to its result and
            // ends without waiting for the video; its clip of camera 2 stops
            // where the stream did (or there is none, saying why).
            let cut = try await play(site, "cy", during: { rtmp.stopCamera("m1-2") })
            let cutGame = try await record(site, cut)
            #expect(cutGame["outcome"] as? String == "won", "\(cutGame)")
            let cutClips = cutGame["evidence"] as? [[String: Any]] ?? []
            let full = (cutClips.first { $0["camera"] as? String == "1" }?["duration_s"] as? Double) ?? 0
            #expect(full > 4, "camera 1 recorded the whole game: \(cutClips)")
            if let partial = cutClips.first(where: { $0["camera"] as? String == "2" })?["duration_s"] as? Double {
                #expect(partial < full - 1.5, "camera 2's clip ends where its stream did: \(partial) s of \(full) s")
            } else {
                let gap = (cutGame["evidence_missing"] as? [[String: Any]])?.first { $0["camera"] as? String == "2" }
                #expect(gap?["reason"] is String, "camera 2 has neither a clip nor a reason: \(cutGame)")
            }

            // Camera 2's stream gone: the next game has no clip of it, and says why.
            try await eventually("camera 2's recording down", timeout: .seconds(40)) { await !recording(site, camera: "2") }
            let second = try await play(site, "bob")
            let next = try await record(site, second)
            #expect((next["evidence"] as? [[String: Any]])?.compactMap { $0["camera"] as? String } == ["1"], "\(next)")
            let missing = next["evidence_missing"] as? [[String: Any]] ?? []
            #expect(missing.count == 1 && missing.first?["camera"] as? String == "2", "\(next)")
            #expect((missing.first?["reason"] as? String)?.contains("down") == true, "\(missing)")
            let gone = try await HTTP.get("\(site.base)/v1/machines/m1/games/\(second)/evidence/2", bearer: Self.readToken)
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

        /// SPEC §14, "the video never fills the disk the database lives on":
        /// the evidence folder on a tmpfs of 8 MiB in the gateway's own mount
        /// namespace (`unshare -m`: nothing to unmount, nothing seen outside),
        /// with `min_free: 2MiB`, filled through `/proc/<pid>/root` until
        /// 1.5 MiB are left. The oldest unheld clips go (a held game's stay),
        /// then recording and cutting stop and say why (metrics, log,
        /// reasons); the video writes nothing more, and a game plays to its
        /// result, recorded without a clip, saying why. With room again,
        /// recording comes back and the next game has its clip. The site has
        /// a read token: the dashboard fetches that clip with it and plays it
        /// from memory (a `<video>` cannot send one), in the real browser.
        @Test func belowMinFreeTheOldestClipsGoThenRecordingStopsAndTheGamesPlayOn() async throws {
            guard FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else {
                throw BrokerError("unshare (util-linux) is missing, and the min_free test needs it for a tmpfs of its own")
            }
            try await Self.withCameras(
                simulate: false, evidence: "min_free: 2MiB",
                launcher: { site in
                    let folder = site.directory.appendingPathComponent("evidence").path
                    return ["/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                        #"mkdir -p "$EVIDENCE" && mount -t tmpfs -o size=8m tmpfs "$EVIDENCE" && exec "$0" "$@""#.replacingOccurrences(of: "$EVIDENCE", with: folder)]
                }
            ) { site, _ in try await belowMinFree(site) }
        }

        static let readToken = "evidence-read-token-0123"
        static let reader = [("Authorization", "Bearer \(readToken)")]

        private func metrics(_ site: E2ESite) async -> String {
            (try? await HTTP.request(.GET, "\(site.base)/metrics", headers: Self.reader).body) ?? ""
        }

        private func belowMinFree(_ site: E2ESite) async throws {
            let reader = Self.reader
            try site.restartSimulator()
            try await eventually("the simulated machine online") {
                (try? await HTTP.request(.GET, "\(site.base)/v1/machines/m1", headers: reader))?.json["online"] as? Bool == true
            }
            let pid = try #require(site.gateway?.pid)
            // The gateway's view of its evidence folder: its own tmpfs.
            let folder = "/proc/\(pid)/root\(site.site.directory.appendingPathComponent("evidence").path)"
            try await eventually("the tmpfs mounted for the gateway") { (DiskSpace.available(at: folder) ?? 0) <= 8 << 20 }
            try await eventually("both cameras recording", timeout: .seconds(30)) { await bothRecording(site, headers: reader) }
            // Two games with their clips; an operator holds the first's.
            let held = try await play(site, "ann", headers: reader)
            #expect(((try await record(site, held, headers: reader))["evidence"] as? [[String: Any]])?.count == 2, "clips while there is room")
            let hold = try await HTTP.request(
                .POST, "\(site.base)/v1/machines/m1/games/\(held)/evidence/hold", headers: Self.admin,
                body: Array(#"{"hold":true,"reason":"ticket 42"}"#.utf8))
            #expect(hold.status == 200, "\(hold.body)")
            let unheld = try await play(site, "dan", headers: reader)
            #expect(((try await record(site, unheld, headers: reader))["evidence"] as? [[String: Any]])?.count == 2)

            // Something else fills the disk until 1.5 MiB are left, below min_free.
            let filler = "\(folder)/filler"
            let descriptor = open(filler, O_WRONLY | O_CREAT | O_APPEND, 0o600)
            try #require(descriptor >= 0, "the filler file: errno \(errno)")
            let chunk = [UInt8](repeating: 0x5A, count: 64 << 10)
            while (DiskSpace.available(at: folder) ?? 0) > (3 << 20) / 2 + chunk.count {
                guard chunk.withUnsafeBytes({ write(descriptor, $0.baseAddress, $0.count) }) == chunk.count else { break }
            }
            close(descriptor)
            #expect((DiskSpace.available(at: folder) ?? -1) < 2 << 20)
            try await eventually("recording and cutting stopped for min_free, in the metrics", timeout: .seconds(30)) {
                let text = await metrics(site)
                return text.contains("claw_evidence_low_disk 1")
                    && text.contains(#"claw_evidence_recording_up{machine="m1",camera="1"} 0"#)
                    && text.contains(#"claw_evidence_recording_up{machine="m1",camera="2"} 0"#)
            }
            #expect(site.site.logText.contains("Recording and cutting stopped"), "the log says why the recording stopped")
            // The unheld game's clips went first, saying why; the held game's stay.
            let deleted = try await record(site, unheld, headers: reader)
            let reasons = (deleted["evidence_missing"] as? [[String: Any]] ?? []).compactMap { $0["reason"] as? String }
            #expect(reasons == Array(repeating: "deleted to keep min_free (2MiB) free on the disk", count: 2), "\(deleted)")
            #expect(try await HTTP.bytes("\(site.base)/v1/machines/m1/games/\(held)/evidence/1", headers: reader).status == 200)
            let stopped = DiskSpace.available(at: folder) ?? 0

            // The gateway plays on: a game to its result, recorded without a clip, saying why.
            let second = try await play(site, "bob", headers: reader)
            let game = try await record(site, second, headers: reader)
            #expect(game["outcome"] as? String == "won", "\(game)")
            #expect((game["evidence"] as? [[String: Any]] ?? []).isEmpty, "\(game)")
            let missing = game["evidence_missing"] as? [[String: Any]] ?? []
            #expect(
                missing.count == 2 && missing.allSatisfy { ($0["reason"] as? String)?.contains("less than min_free (2MiB) is free on the disk") == true },
                "\(missing)")
            // Meanwhile the video wrote nothing into the room min_free keeps.
            #expect((DiskSpace.available(at: folder) ?? 0) >= stopped - (64 << 10), "the ring and the clips stopped growing")

            // Room again: recording comes back, and the next game has its clip.
            try FileManager.default.removeItem(atPath: filler)
            try await eventually("both cameras recording again", timeout: .seconds(40)) { await bothRecording(site, headers: reader) }
            #expect(await metrics(site).contains("claw_evidence_low_disk 0"))
            #expect(site.site.logText.contains("Recording and cutting again"))
            let third = try await play(site, "cat", headers: reader)
            #expect(((try await record(site, third, headers: reader))["evidence"] as? [[String: Any]])?.count == 2, "clips once there is room again")

            // The dashboard, given the read token, plays that clip from memory.
            try await WebDriver.with { page in
                try await page.navigate("\(site.base)/dashboard")
                try await page.passReadTokenPrompt(
                    server: "gateway", setting: "http.read_token", token: Self.readToken,
                    nothingShown: { try await page.findAll("section.machine").isEmpty },
                    live: {
                        try await page.waitFor("the dashboard live") { try await page.texts("#link") == ["Live"] }
                    })
                let button = "section.machine[data-machine=\"m1\"] .results li[data-game=\"\(third)\"] button.clip"
                try await page.waitFor("the game's clip listed", timeout: .seconds(20)) { try await page.texts(button) == ["▶ 1", "▶ 2"] }
                try await page.click(try await page.find(button))
                try await page.waitFor("the clip playing from memory, fetched with the token", timeout: .seconds(20)) {
                    let state = try await page.execute(
                        "const v = document.querySelector('video.clip-player'); return v ? [v.readyState, v.videoWidth, v.src.slice(0, 5)] : null")
                    guard case .array(let values) = state, values.count == 3, case .number(let ready) = values[0], case .number(let width) = values[1]
                    else { return false }
                    return ready >= 2 && width == 160 && values[2] == .string("blob:")
                }
            }
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
