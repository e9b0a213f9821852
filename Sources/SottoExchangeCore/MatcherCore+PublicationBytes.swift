// What each app's live publications hold (bytes), kept as they are made, replaced, unpublished, expire or
// go with their session, so that a service can give each project a byte quota (not only a count).

extension MatcherCore {
    /// Bytes a publication is counted for: its namespace and type (UTF-8) and content.
    /// - Parameter message: the published message.
    public static func heldBytes(of message: Message) -> Int {
        message.namespace.utf8.count + message.type.utf8.count + message.content.count
    }

    /// Bytes the live publications of app `appID` hold (namespaces, types and contents).
    /// - Parameter appID: the app (a service's project id).
    public func publicationBytes(ofApp appID: String) -> Int { publicationBytesPerApp[appID] ?? 0 }

    /// The message of a live publication, if any.
    /// - Parameters:
    ///   - session: the publishing session.
    ///   - operation: the publication's id in the session.
    public func publishedMessage(session: SessionID, operation: OperationID) -> Message? {
        sessions[session]?.publications[operation]?.message
    }

    /// Adds `delta` bytes to `appID`'s count.
    mutating func countPublicationBytes(_ delta: Int, app appID: String) {
        guard delta != 0 else { return }
        let total = (publicationBytesPerApp[appID] ?? 0) + delta
        publicationBytesPerApp[appID] = total > 0 ? total : nil
    }

    /// Counts a session's publications out (it closes or is replaced).
    mutating func uncountPublications(of id: SessionID) {
        guard let session = sessions[id] else { return }
        let held = session.publications.values.reduce(0) { $0 + Self.heldBytes(of: $1.message) }
        countPublicationBytes(-held, app: session.appID)
    }

    /// Recomputes the counts from the sessions (after a snapshot is restored).
    mutating func recountPublicationBytes() {
        publicationBytesPerApp = [:]
        for session in sessions.values {
            for publication in session.publications.values { countPublicationBytes(Self.heldBytes(of: publication.message), app: session.appID) }
        }
    }
}
