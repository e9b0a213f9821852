import Foundation
import SottoExchange

/// A live view's server-sent events: its points as they come, and how to stop them (the client left).
public struct LiveEvents: Sendable {
    /// The points, one per sample of the ``LiveFeed``.
    public let points: AsyncStream<LivePoint>
    /// Ends the stream and forgets the watcher.
    public let stop: @Sendable () async -> Void

    /// One point as a server-sent event (`data: JSON`, a blank line).
    static func event(_ point: LivePoint) -> [UInt8] {
        let data = (try? JSONSerialization.data(withJSONObject: point.json, options: [.sortedKeys])) ?? Data("{}".utf8)
        return Array("data: ".utf8) + Array(data) + Array("\n\n".utf8)
    }
}

/// The live views of the admin API (issue 34), read-only and audited at each request (not at each event):
/// `GET /api/projects/P/live` (the project's last point, its publications and subscriptions by namespace/type,
/// its history for the sparklines) and `GET /api/projects/P/live/events` (server-sent events: a point a second).
extension AdminAPI {
    func dispatchLive(_ segments: [String], _ request: AdminRequest, _ caller: Caller) async throws(StoreError) -> AdminResponse? {
        guard request.method == "GET", segments.count >= 3, segments[0] == "projects", segments[2] == "live",
              segments.count == 3 || (segments.count == 4 && segments[3] == "events") else { return nil }
        guard let live else { return .error(404, "this service keeps no live views") }
        guard let project = try await store.project(id: segments[1]) else { throw .unknownProject(segments[1]) }
        if segments.count == 3 {
            await audit(caller, "live.view", project.id, "ok")
            var view = await live.view(project: project.id).json
            view["name"] = project.name
            return .json(200, view)
        }
        guard let watch = await live.watch(project: project.id) else {
            await audit(caller, "live.watch", project.id, "refused: too many watchers")
            return .error(503, "at most \(LiveFeed.maxWatchers) live views at once", headers: [("Retry-After", "5")])
        }
        await audit(caller, "live.watch", project.id, "ok")
        var response = AdminResponse(status: 200, headers: [], body: [], contentType: "text/event-stream")
        response.events = LiveEvents(points: watch.points, stop: { await live.stopWatching(watch.id) })
        return response
    }
}
