import Testing
import SottoModem

/// The embedding example of README.md, verbatim between the markers, so it always compiles and works.
@Test func readmeEmbeddingExample() throws {
    // README-EXAMPLE-BEGIN
    let token: [UInt8] = Array("hello!".utf8)
    let modulator = try Modulator(profile: .standard, sampleRate: 48_000)
    let sound = try modulator.modulate(token)              // [Float], play or save it

    let decoder = try StreamingDecoder(sampleRate: 48_000, profiles: Profile.all)
    var frames = decoder.process(sound)                    // feed chunks of any size
    frames += decoder.finish()                             // end of a finite stream
    for frame in frames {
        print(String(decoding: frame.token, as: UTF8.self), frame.profile, frame.snr)
    }
    // README-EXAMPLE-END
    #expect(frames.map(\.token) == [token])
}
