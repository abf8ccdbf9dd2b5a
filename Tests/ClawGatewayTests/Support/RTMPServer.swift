import Foundation

/// A real RTMP server for the evidence tests (SPEC §14): Debian's nginx with
/// `libnginx-mod-rtmp`, its config written here, on a free loopback port,
/// started and stopped by PID; and ffmpeg as the cameras, each pushing a
/// `-f lavfi` test source of one colour, so that a test can tell a clip's
/// camera by decoding a frame.
final class RTMPServer {
    static let module = "/usr/lib/nginx/modules/ngx_rtmp_module.so"

    let port: Int
    let directory: URL
    private var process: ChildProcess?
    private var cameras: [String: ChildProcess] = [:]

    /// `rtmp://127.0.0.1:<port>/live`: a camera's stream is this and its key.
    var base: String { "rtmp://127.0.0.1:\(port)/live" }

    init() throws {
        guard FileManager.default.isExecutableFile(atPath: Self.nginx), FileManager.default.fileExists(atPath: Self.module) else {
            throw BrokerError(
                "nginx with its RTMP module is not installed, and the evidence tests need a real RTMP server. Run ./scripts/test (it installs it) or: sudo apt-get install -y nginx-light libnginx-mod-rtmp")
        }
        guard let ffmpeg = Self.tool("ffmpeg"), Self.tool("ffprobe") != nil else {
            throw BrokerError("ffmpeg is not installed, and the evidence tests need it. Run ./scripts/test (it installs it) or: sudo apt-get install -y ffmpeg")
        }
        _ = ffmpeg
        port = try FreePort.next()
        directory = try TemporaryDirectory.make(prefix: "rtmp")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("logs"), withIntermediateDirectories: true)
        try """
            load_module \(Self.module);
            daemon off;
            master_process off;
            worker_processes 1;
            error_log \(directory.path)/logs/error.log warn;
            pid \(directory.path)/nginx.pid;
            events { worker_connections 256; }
            rtmp {
              server {
                listen 127.0.0.1:\(port);
                application live { live on; record off; }
              }
            }

            """.write(to: directory.appendingPathComponent("nginx.conf"), atomically: true, encoding: .utf8)
    }

    static let nginx = "/usr/sbin/nginx"

    static func tool(_ name: String) -> String? {
        ["/usr/bin", "/usr/local/bin"].map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    func start() throws {
        process = try ChildProcess(
            Self.nginx, ["-c", directory.appendingPathComponent("nginx.conf").path, "-p", directory.path],
            output: directory.appendingPathComponent("logs/nginx.out"))
    }

    /// A camera pushing `colour` (an ffmpeg colour name) as `key`, 25 frames a second, a keyframe every second.
    func startCamera(_ key: String, colour: String) throws {
        cameras[key] = try ChildProcess(
            Self.tool("ffmpeg") ?? "ffmpeg",
            [
                "-nostdin", "-loglevel", "error", "-re", "-f", "lavfi", "-i", "color=c=\(colour):s=160x120:r=25", "-c:v", "libx264",
                "-preset", "ultrafast", "-tune", "zerolatency", "-g", "25", "-pix_fmt", "yuv420p", "-f", "flv", "\(base)/\(key)",
            ], output: directory.appendingPathComponent("logs/camera-\(key).log"))
    }

    /// The camera's stream cut: its ffmpeg killed.
    func stopCamera(_ key: String) {
        guard let camera = cameras.removeValue(forKey: key) else { return }
        camera.signal(SIGKILL)
        _ = camera.wait()
    }

    func stop() {
        for key in Array(cameras.keys) { stopCamera(key) }
        process?.signal(SIGTERM)
        _ = process?.wait()
        process = nil
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// A clip's duration as ffprobe reads it.
    static func duration(of file: URL) throws -> Double {
        let output = try capture("ffprobe", ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", file.path])
        guard let seconds = Double(String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw BrokerError("ffprobe read no duration of \(file.path)")
        }
        return seconds
    }

    /// A clip's first frame, shrunk to one pixel: its red, green and blue.
    static func colour(of file: URL) throws -> [UInt8] {
        Array(try capture("ffmpeg", ["-nostdin", "-loglevel", "error", "-i", file.path, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "1x1", "-"]))
    }

    private static func capture(_ tool: String, _ arguments: [String]) throws -> Data {
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("capture-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: output) }
        let process = try ChildProcess(Self.tool(tool) ?? tool, arguments, output: output)
        let status = process.wait()
        guard status == 0 else { throw BrokerError("\(tool) \(arguments.joined(separator: " ")) exited \(status)") }
        return try Data(contentsOf: output)
    }
}
