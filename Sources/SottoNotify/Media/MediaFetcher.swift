import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1

/// Seed 002's media limits, and this machine's cache and network bounds. Sizes in bytes, times in seconds.
public struct MediaLimits: Sendable, Equatable {
    /// JPG/JPEG/PNG/GIF larger than this are not shown (10 MB).
    public var imageBytes: Int
    /// MP4/AVI larger than this are not downloaded (50 MB).
    public var videoBytes: Int
    /// A whole download (every redirect and the body) taking longer falls back to a plain notification.
    public var timeout: Double
    /// Redirects followed before giving up.
    public var maxRedirects: Int
    /// The cache directory is trimmed (oldest first) to at most this many bytes.
    public var cacheBytes: Int

    /// Limits; the defaults are seed 002's (10 MB images, 50 MB videos).
    /// - Parameters:
    ///   - imageBytes: the image size limit in bytes.
    ///   - videoBytes: the video size limit in bytes.
    ///   - timeout: seconds a download may take.
    ///   - maxRedirects: redirects followed at most.
    ///   - cacheBytes: the cache's size cap in bytes.
    public init(imageBytes: Int = 10_000_000, videoBytes: Int = 50_000_000, timeout: Double = 30, maxRedirects: Int = 5,
                cacheBytes: Int = 200_000_000) {
        self.imageBytes = imageBytes
        self.videoBytes = videoBytes
        self.timeout = timeout
        self.maxRedirects = maxRedirects
        self.cacheBytes = cacheBytes
    }
}

/// What became of a message's media: what to show (nil: a plain notification) and, when it fell back, why.
public struct MediaResult: Sendable, Equatable {
    /// What the notification shows.
    public var media: NotificationMedia?
    /// Why the media is not shown, when it is not (for the log).
    public var fallbackReason: String?
}

/// Downloads the image or video a message's content is (or carries) into a size-capped cache, within seed 002's
/// limits, with AsyncHTTPClient (redirects followed by hand so that each hop is checked: http(s) only, no loops).
public actor MediaFetcher {
    /// The kind of media a URL names, by its path's extension (as the seed decides before downloading).
    enum Kind: Equatable { case image, video, audio, unknown }

    let cacheDirectory: URL
    let limits: MediaLimits
    let metering: NetworkMetering?
    private let client: HTTPClient

    /// A fetcher caching under `cacheDirectory`.
    /// - Parameters:
    ///   - cacheDirectory: where downloads are kept (created, mode 0700); see ``defaultCacheDirectory(environment:)``.
    ///   - limits: sizes, time-out and cache cap.
    ///   - metering: the metered-connection probe; nil never treats the connection as metered.
    public init(cacheDirectory: URL, limits: MediaLimits = MediaLimits(), metering: NetworkMetering? = NetworkMetering()) {
        self.cacheDirectory = cacheDirectory
        self.limits = limits
        self.metering = metering
        // The whole download is bounded by `limits.timeout` (a timer of our own); these only catch a stall sooner.
        let timeout = TimeAmount.milliseconds(Int64((min(limits.timeout, 10) + 1) * 1000))
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup,
                            configuration: .init(redirectConfiguration: .disallow, timeout: .init(connect: timeout, read: timeout)))
    }

    /// `$XDG_CACHE_HOME/sotto/media`, else `$HOME/.cache/sotto/media`.
    /// - Parameter environment: the environment to read.
    public static func defaultCacheDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> URL {
        let base = environment["XDG_CACHE_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.cache"
        return URL(fileURLWithPath: base).appendingPathComponent("sotto").appendingPathComponent("media")
    }

    /// Stops the HTTP client; call once when done.
    public func shutdown() async {
        try? await client.shutdown()
    }

    /// The media to show with `event`: none when its content carries no http(s) URL.
    /// - Parameter event: the found message.
    public func media(for event: NotificationEvent) async -> MediaResult {
        guard let url = event.carriedURL else { return MediaResult(media: nil, fallbackReason: nil) }
        let kind = Self.kind(of: url)
        switch kind {
        case .audio:
            return MediaResult(media: .link(url: url), fallbackReason: "audio is not downloaded")
        case .video:
            if let metering, await metering.isMetered() {
                return MediaResult(media: .link(url: url), fallbackReason: "metered connection: video not downloaded")
            }
        case .image, .unknown:
            break
        }
        do {
            let path = try await download(url, kind: kind)
            switch kind {
            case .video: return MediaResult(media: .video(path: path, url: url), fallbackReason: nil)
            default: return MediaResult(media: .image(path: path), fallbackReason: nil)
            }
        } catch let error as HTTPClientError where [.readTimeout, .connectTimeout, .deadlineExceeded].contains(error) {
            return MediaResult(media: kind == .unknown ? nil : .link(url: url), fallbackReason: "download timed out (\(error))")
        } catch {
            return MediaResult(media: kind == .unknown ? nil : .link(url: url), fallbackReason: "\(error)")
        }
    }

    /// Why a download was abandoned.
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func kind(of url: String) -> Kind {
        guard let path = URLComponents(string: url)?.path.lowercased() else { return .unknown }
        switch (path as NSString).pathExtension {
        case "jpg", "jpeg", "png", "gif": return .image
        case "mp4", "avi": return .video
        case "mp3", "wav", "m4a", "aac", "ogg", "oga", "opus", "flac", "aif", "aiff", "caf", "wma": return .audio
        default: return .unknown
        }
    }

    /// Downloads `url` into the cache (or finds it there) and returns the file's path.
    func download(_ url: String, kind: Kind) async throws -> String {
        let cap = kind == .video ? limits.videoBytes : limits.imageBytes
        let name = SHA256.hash(data: Data(url.utf8)).map { String(format: "%02x", $0) }.joined()
        let fileManager = FileManager.default
        try fileManager.createDirectory(at: cacheDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if let cached = try? fileManager.contentsOfDirectory(atPath: cacheDirectory.path).first(where: { $0.hasPrefix(name + ".") && !$0.hasSuffix(".part") }) {
            let path = cacheDirectory.appendingPathComponent(cached).path
            try? fileManager.setAttributes([.modificationDate: Date()], ofItemAtPath: path)
            return path
        }
        // A name of its own per download: two finds of one URL may download at once (the actor is reentrant).
        let partial = cacheDirectory.appendingPathComponent(name + "-" + UUID().uuidString + ".part")
        let timeout = limits.timeout
        let signature: String = try await withThrowingTaskGroup(of: String?.self) { group in
            group.addTask { try await self.fetch(url, to: partial, cap: cap, kind: kind) }
            group.addTask {
                try await Task.sleep(for: .milliseconds(Int(timeout * 1000)))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let signature = first else {
                throw Failure(description: "download timed out after \(timeout) s")
            }
            return signature
        }
        let final = cacheDirectory.appendingPathComponent(name + "." + signature)
        guard rename(partial.path, final.path) == 0 else { throw Failure(description: "cannot store the download in the cache") }
        trimCache(keeping: final.lastPathComponent)
        return final.path
    }

    /// Streams `url` (following up to `maxRedirects` http(s) redirects) into `file`, at most `cap` bytes, and
    /// returns the file's verified type ("jpg", "png", "gif", "mp4", "avi").
    private func fetch(_ start: String, to file: URL, cap: Int, kind: Kind) async throws -> String {
        var url = start
        var visited: Set<String> = []
        var keep = false
        defer { if !keep { try? FileManager.default.removeItem(at: file) } }
        for _ in 0...limits.maxRedirects {
            guard MediaURL.isAllowed(url) else { throw Failure(description: "not an http(s) URL: \(url)") }
            guard visited.insert(url).inserted else { throw Failure(description: "redirect loop at \(url)") }
            let response = try await client.execute(HTTPClientRequest(url: url), timeout: .seconds(Int64(max(1, limits.timeout))))
            if (300..<400).contains(response.status.code) {
                guard let location = response.headers.first(name: "location"),
                      let next = URL(string: location, relativeTo: URL(string: url))?.absoluteURL.absoluteString else {
                    throw Failure(description: "redirect without a location")
                }
                url = next
                continue
            }
            guard response.status == .ok else { throw Failure(description: "HTTP \(response.status.code)") }
            if let length = response.headers.first(name: "content-length").flatMap(Int.init), length > cap {
                throw Failure(description: "\(length) bytes is over the \(cap)-byte limit")
            }
            if kind == .unknown, let type = response.headers.first(name: "content-type"), !type.lowercased().hasPrefix("image/") {
                throw Failure(description: "not an image (\(type))")
            }
            guard FileManager.default.createFile(atPath: file.path, contents: nil, attributes: [.posixPermissions: 0o600]),
                  let handle = try? FileHandle(forWritingTo: file) else { throw Failure(description: "cannot write the cache") }
            defer { try? handle.close() }
            var total = 0
            var head: [UInt8] = []
            for try await buffer in response.body {
                total += buffer.readableBytes
                guard total <= cap else { throw Failure(description: "over the \(cap)-byte limit") }
                if head.count < 16 { head += buffer.getBytes(at: buffer.readerIndex, length: min(16 - head.count, buffer.readableBytes)) ?? [] }
                try handle.write(contentsOf: Data(buffer.readableBytesView))
            }
            try handle.synchronize()
            guard let type = MediaURL.sniff(head), kind == .video ? ["mp4", "avi"].contains(type) : ["jpg", "png", "gif"].contains(type) else {
                throw Failure(description: kind == .video ? "not an MP4/AVI video" : "not a JPEG/PNG/GIF image")
            }
            keep = true  // the caller renames it into place
            return type
        }
        throw Failure(description: "more than \(limits.maxRedirects) redirects")
    }

    /// Deletes the oldest cached files until the cache holds at most `cacheBytes`, never `kept`.
    private func trimCache(keeping kept: String) {
        let fileManager = FileManager.default
        guard let names = try? fileManager.contentsOfDirectory(atPath: cacheDirectory.path) else { return }
        var files: [(path: String, size: Int, date: Date)] = names.compactMap { name in
            let path = cacheDirectory.appendingPathComponent(name).path
            guard !name.hasSuffix(".part"), let attributes = try? fileManager.attributesOfItem(atPath: path) else { return nil }
            return (path, (attributes[.size] as? Int) ?? 0, (attributes[.modificationDate] as? Date) ?? .distantPast)
        }
        var total = files.reduce(0) { $0 + $1.size }
        files.sort { $0.date < $1.date }
        for file in files where total > limits.cacheBytes && !file.path.hasSuffix("/" + kept) {
            if (try? fileManager.removeItem(atPath: file.path)) != nil { total -= file.size }
        }
    }
}

/// URL and content checks for media.
enum MediaURL {
    /// Only http and https, with a host.
    static func isAllowed(_ url: String) -> Bool { NotificationEvent.isWebURL(url) }

    /// The type the first bytes show: "jpg", "png", "gif", "mp4", "avi", or nil.
    static func sniff(_ head: [UInt8]) -> String? {
        if head.starts(with: [0xFF, 0xD8, 0xFF]) { return "jpg" }
        if head.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return "png" }
        if head.starts(with: Array("GIF87a".utf8)) || head.starts(with: Array("GIF89a".utf8)) { return "gif" }
        if head.count >= 12, Array(head[4..<8]) == Array("ftyp".utf8) { return "mp4" }
        if head.count >= 12, head.starts(with: Array("RIFF".utf8)), Array(head[8..<12]) == Array("AVI ".utf8) { return "avi" }
        return nil
    }
}
