import Foundation
import NIOHTTP1
import Synchronization
import Testing
@testable import SottoNotify

/// Media downloads from an HTTP server on loopback started by each test: seed 002's limits by type and size,
/// time-out, redirect loops, garbage, the metered rule through a NetworkManager stand-in on a bus of its own.
@Suite(.serialized, .timeLimit(.minutes(1))) struct MediaFetcherTests {
    static let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 7, count: 200)
    static let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0] + Array(repeating: 1, count: 2_000)
    static let gif: [UInt8] = Array("GIF89a".utf8) + Array(repeating: 2, count: 50)
    static let mp4: [UInt8] = [0, 0, 0, 0x18] + Array("ftypisom".utf8) + Array(repeating: 3, count: 300)

    static let routes: @Sendable (String) -> TestHTTPServer.Reply = { path in
        switch path {
        case "/a.png": .respond(headers: [("content-type", "image/png")], body: MediaFetcherTests.png)
        case "/big.jpg": .respond(body: MediaFetcherTests.jpeg)  // over the test's 1 000-byte image limit, by Content-Length
        case "/chunked.jpg": .respond(body: MediaFetcherTests.jpeg, length: false)  // over the limit while streaming
        case "/garbage.png": .respond(body: Array("<html>not an image</html>".utf8))
        case "/stall.jpg": .hold
        case "/loop1.gif": .respond(status: .found, headers: [("location", "/loop2.gif")])
        case "/loop2.gif": .respond(status: .found, headers: [("location", "/loop1.gif")])
        case "/to-file.gif": .respond(status: .movedPermanently, headers: [("location", "file:///etc/passwd")])
        case "/hop.gif": .respond(status: .found, headers: [("location", "/c.gif")])
        case "/c.gif": .respond(body: MediaFetcherTests.gif)
        case "/clip.mp4": .respond(body: MediaFetcherTests.mp4)
        case "/song.mp3": .respond(body: [1, 2, 3])
        case "/noextension": .respond(headers: [("content-type", "image/gif")], body: MediaFetcherTests.gif)
        case "/page": .respond(headers: [("content-type", "text/html")], body: Array("<html></html>".utf8))
        case "/missing.png": .respond(status: .notFound)
        default: .respond(status: .notFound)
        }
    }

    func found(_ text: String) -> NotificationEvent {
        NotificationEvent(kind: .found, subscriptionID: "s", content: Array(text.utf8), foundAt: Date(timeIntervalSince1970: 1_800_000_000))
    }

    func cache() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("sotto-media-\(UUID().uuidString.prefix(8))")
    }

    /// A download's time limit is 3 s: long for a loopback server, so that a loaded machine does not turn a
    /// download into a time-out; the stalled route holds its request forever, so time-outs are still tested.
    static let limits = MediaLimits(imageBytes: 1_000, videoBytes: 1_000, timeout: 3, maxRedirects: 5, cacheBytes: 10_000)

    /// A fetcher with the test's limits (and `metering`) into a fresh cache, and the routes' HTTP server; both stopped,
    /// and the cache removed, after `body`.
    func withFetcher(metering: NetworkMetering? = nil,
                     _ body: (TestHTTPServer, URL, MediaFetcher) async throws -> Void) async throws {
        let server = try await TestHTTPServer(routes: Self.routes)
        let directory = cache()
        defer { try? FileManager.default.removeItem(at: directory) }
        let fetcher = MediaFetcher(cacheDirectory: directory, limits: Self.limits, metering: metering)
        do { try await body(server, directory, fetcher) } catch {
            await fetcher.shutdown(); await server.stop()
            throw error
        }
        await fetcher.shutdown()
        await server.stop()
    }

    @Test func anImageWithinItsLimitIsCachedAndShown() async throws {
        try await withFetcher { server, directory, fetcher in
            let result = await fetcher.media(for: found("look: \(server.url("/a.png")) !"))
            guard case .image(let path)? = result.media else { Issue.record("no image: \(result)"); return }
            #expect(path.hasPrefix(directory.path) && path.hasSuffix(".png"))
            let cached = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(cached == Data(Self.png))
            // A second find of the same URL is served from the cache.
            let again = await fetcher.media(for: found(server.url("/a.png")))
            #expect(again.media == .image(path: path))
            #expect(server.paths == ["/a.png"])
            // Redirects are followed; a URL without an extension is shown when it serves an image.
            #expect(await fetcher.media(for: found(server.url("/hop.gif"))).media.map { if case .image = $0 { true } else { false } } == true)
            #expect(await fetcher.media(for: found(server.url("/noextension"))).media.map { if case .image = $0 { true } else { false } } == true)
        }
    }

    @Test func overTheLimitGarbageAndErrorsFallBackToAPlainNotification() async throws {
        try await withFetcher { server, directory, fetcher in
            for (path, reason) in [("/big.jpg", "limit"), ("/chunked.jpg", "limit"), ("/garbage.png", "not a JPEG/PNG/GIF"),
                                   ("/missing.png", "HTTP 404")] {
                let result = await fetcher.media(for: found(server.url(path)))
                #expect(result.media == .link(url: server.url(path)), "\(path)")
                #expect(result.fallbackReason?.contains(reason) == true, "\(path): \(result.fallbackReason ?? "")")
            }
            let page = await fetcher.media(for: found(server.url("/page")))
            #expect(page.media == nil && page.fallbackReason?.contains("not an image") == true)
            // Nothing but finished downloads stays in the cache.
            let kept = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            #expect(kept.isEmpty)
        }
    }

    @Test func aStalledServerTimesOutToAPlainNotification() async throws {
        try await withFetcher { server, directory, fetcher in
            let started = ContinuousClock.now
            let result = await fetcher.media(for: found(server.url("/stall.jpg")))
            let elapsed = ContinuousClock.now - started
            #expect(result.media == .link(url: server.url("/stall.jpg")))
            #expect(result.fallbackReason?.contains("timed out") == true, "\(result.fallbackReason ?? "")")
            // The server holds the request forever: the 3 s limit ended it, not the system's own time-out (60 s and
            // more); the bound leaves room for a loaded CI machine.
            #expect(elapsed < .seconds(20))
        }
    }

    @Test func redirectLoopsAndRedirectsAwayFromHTTPAreRefused() async throws {
        try await withFetcher { server, directory, fetcher in
            let loop = await fetcher.media(for: found(server.url("/loop1.gif")))
            #expect(loop.fallbackReason?.contains("redirect loop") == true, "\(loop.fallbackReason ?? "")")
            #expect(server.paths == ["/loop1.gif", "/loop2.gif"])
            let file = await fetcher.media(for: found(server.url("/to-file.gif")))
            #expect(file.fallbackReason?.contains("not an http(s) URL: file:///etc/passwd") == true, "\(file.fallbackReason ?? "")")
            // Content that is a file:// or other URL is never fetched at all.
            for content in ["file:///etc/passwd", "ftp://127.0.0.1:\(server.port)/a.png", "gopher://x/a.png"] {
                #expect(await fetcher.media(for: found(content)) == MediaResult(media: nil, fallbackReason: nil))
            }
            #expect(server.paths.count == 3)
        }
    }

    @Test func onAMeteredConnectionVideoAndAudioAreNotDownloadedButImagesAre() async throws {
        let systemBus = try TestBus()
        defer { systemBus.stop() }
        let networkManager = try NetworkManagerStandIn(address: systemBus.address, metered: 1)
        defer { networkManager.stop() }
        try await withFetcher(metering: NetworkMetering(systemBusAddress: systemBus.address)) { server, directory, fetcher in
            let video = await fetcher.media(for: found(server.url("/clip.mp4")))
            #expect(video.media == .link(url: server.url("/clip.mp4")))
            #expect(video.fallbackReason?.contains("metered") == true)
            let audio = await fetcher.media(for: found(server.url("/song.mp3")))
            #expect(audio.media == .link(url: server.url("/song.mp3")))
            let image = await fetcher.media(for: found(server.url("/a.png")))
            #expect(image.media.map { if case .image = $0 { true } else { false } } == true)
            #expect(server.paths == ["/a.png"])
            #expect(networkManager.asked.withLock { $0 } == 1)
        }
    }

    @Test func onAnUnmeteredConnectionAVideoIsDownloadedWithinItsLimit() async throws {
        let systemBus = try TestBus()
        defer { systemBus.stop() }
        let networkManager = try NetworkManagerStandIn(address: systemBus.address, metered: 4)  // guess-no
        defer { networkManager.stop() }
        try await withFetcher(metering: NetworkMetering(systemBusAddress: systemBus.address)) { server, directory, fetcher in
            let video = await fetcher.media(for: found(server.url("/clip.mp4")))
            guard case .video(let path, let url)? = video.media else { Issue.record("no video: \(video)"); return }
            #expect(url == server.url("/clip.mp4") && path.hasSuffix(".mp4"))
            // No NetworkManager at all: not metered.
            #expect(await NetworkMetering(systemBusAddress: "unix:path=\(directory.path)/none").isMetered() == false)
        }
    }

    @Test func theCacheIsTrimmedOldestFirstToItsCap() async throws {
        let images = (0..<5).map { i in [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: UInt8(i), count: 392) }
        let server = try await TestHTTPServer { path in
            guard let i = Int(path.dropFirst().prefix { $0.isNumber }), i < images.count else { return .respond(status: .notFound) }
            return .respond(body: images[i])
        }
        let directory = cache()
        defer { try? FileManager.default.removeItem(at: directory) }
        var limits = Self.limits
        limits.cacheBytes = 1_000  // two and a half images
        let fetcher = MediaFetcher(cacheDirectory: directory, limits: limits, metering: nil)
        var paths: [String] = []
        for i in 0..<5 {
            guard case .image(let path)? = await fetcher.media(for: found(server.url("/\(i).png"))).media else {
                Issue.record("image \(i) not shown"); await fetcher.shutdown(); return
            }
            paths.append(path)
            try await Task.sleep(for: .milliseconds(20))
        }
        let kept = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(kept.count == 2)
        #expect(Set(kept) == Set(paths.suffix(2).map { ($0 as NSString).lastPathComponent }))
        await fetcher.shutdown()
        await server.stop()
    }

    /// A desktop notifier with `policy`, fetching media through a fetcher with `limits` into a fresh cache, on a bus
    /// of its own with a recording notification server, and the routes' HTTP server; all stopped after `body`.
    func withNotifier(policy: NotificationPolicy,
                      _ body: (TestHTTPServer, RecordingNotificationServer, URL, DesktopNotifier) async throws -> Void) async throws {
        let bus = try TestBus()
        defer { bus.stop() }
        let notifications = try RecordingNotificationServer(address: bus.address)
        defer { notifications.stop() }
        try await withFetcher { server, directory, fetcher in
            let notifier = try DesktopNotifier(busAddress: bus.address, configuration: .init(policy: policy), media: fetcher)
            do { try await body(server, notifications, directory, notifier) } catch {
                await notifier.close()
                throw error
            }
            await notifier.close()
        }
    }

    @Test func theNotificationShowsTheImageAndTheFindTimeNotTheDownloadTime() async throws {
        try await withNotifier(policy: .init(timeZone: TimeZone(identifier: "UTC")!)) { server, notifications, directory, notifier in
            await notifier.deliver(found(server.url("/a.png")))
            #expect(await notifications.wait { $0.notifies.count == 1 })
            let shown = notifications.notifies[0]
            guard case .string(let image)? = shown.hints["image-path"] else {
                Issue.record("no image-path hint"); return
            }
            #expect(image.hasPrefix("file://" + directory.path) && image.hasSuffix(".png"))
            #expect(shown.body.hasSuffix("found at 08:00:00"))
            // A stalled download falls back to a plain notification, still with the find time.
            await notifier.deliver(NotificationEvent(kind: .found, subscriptionID: "t", content: Array(server.url("/stall.jpg").utf8),
                                                     foundAt: Date(timeIntervalSince1970: 1_800_000_005)))
            #expect(await notifications.wait { $0.notifies.count == 2 })
            #expect(notifications.notifies[1].hints["image-path"] == nil)
            #expect(notifications.notifies[1].body.hasSuffix("found at 08:00:05"))
        }
    }

    @Test func aLostRightAfterAFindWaitsForTheFindsDownload() async throws {
        try await withNotifier(policy: .init(lost: .withdraw)) { server, notifications, _, notifier in
            let stalled = found(server.url("/stall.jpg"))
            async let first: Void = notifier.deliver(stalled)
            try await Task.sleep(for: .milliseconds(100))  // the download is under way (it times out after 3 s)
            var lost = stalled
            lost.kind = .lost
            await notifier.deliver(lost)
            await first
            #expect(await notifications.wait { $0.closes.count == 1 })
            #expect(notifications.notifies.count == 1 && notifications.closes == [notifications.notifies[0].assignedID])
        }
    }

    @Test func theCacheDirectoryFollowsXDG() {
        #expect(MediaFetcher.defaultCacheDirectory(environment: ["XDG_CACHE_HOME": "/x/cache", "HOME": "/h"]).path == "/x/cache/sotto/media")
        #expect(MediaFetcher.defaultCacheDirectory(environment: ["XDG_CACHE_HOME": "relative", "HOME": "/h"]).path == "/h/.cache/sotto/media")
        #expect(MediaFetcher.kind(of: "http://h/a.JPEG?x=1") == .image && MediaFetcher.kind(of: "http://h/v.avi") == .video)
        #expect(MediaFetcher.kind(of: "http://h/s.wav") == .audio && MediaFetcher.kind(of: "http://h/x") == .unknown)
    }
}
