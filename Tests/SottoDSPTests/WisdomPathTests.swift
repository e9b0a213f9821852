import SottoDSP
import Testing

/// Where the user's FFTW wisdom is (`sotto tune` writes it, every decoder reads it).
struct WisdomPathTests {
    @Test func theUsersFileFollowsTheEnvironment() {
        #expect(FFTWisdom.userPath(environment: ["HOME": "/home/a"]) == "/home/a/.cache/sotto/fftw-wisdomf")
        #expect(FFTWisdom.userPath(environment: ["HOME": "/home/a", "XDG_CACHE_HOME": "/var/cache/a"]) == "/var/cache/a/sotto/fftw-wisdomf")
        #expect(FFTWisdom.userPath(environment: ["HOME": "/home/a", "SOTTO_FFTW_WISDOM": "/tmp/w"]) == "/tmp/w")
        #expect(FFTWisdom.userPath(environment: ["HOME": "/home/a", "XDG_CACHE_HOME": "relative"]) == "/home/a/.cache/sotto/fftw-wisdomf")
        #expect(FFTWisdom.userPath(environment: [:]) == nil)
    }
}
