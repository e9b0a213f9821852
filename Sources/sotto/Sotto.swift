import ArgumentParser

/// The `sotto` command line: send, decode, simulate and benchmark near-ultrasonic tokens.
@main
struct Sotto: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sotto",
        abstract: "Move short tokens between nearby machines as near-ultrasonic sound.",
        subcommands: [Send.self, Decode.self, Listen.self, Devices.self, Publish.self, Subscribe.self, Beacon.self, Serve.self, Admin.self, Load.self, Profiles.self, Simulate.self, Bench.self, MakeFixtures.self])
}
