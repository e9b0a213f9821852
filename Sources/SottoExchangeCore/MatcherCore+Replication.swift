extension MatcherCore {
    /// Replaces the source of the tokens the core issues from now on. A replicated service gives every
    /// replica the same generator before each log entry, so that all replicas issue the same tokens.
    public mutating func useGenerator(_ generator: any RandomNumberGenerator & Sendable) {
        self.generator = generator
    }
}
