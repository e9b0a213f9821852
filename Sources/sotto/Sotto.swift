import ArgumentParser
import Foundation
import SottoSupport
import SottoTools

/// The `sotto` command line: send, decode, simulate and benchmark near-ultrasonic tokens.
@main
struct Sotto: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sotto",
        abstract: "Move short tokens between nearby machines as near-ultrasonic sound.",
        discussion: """
            Every file argument takes - for standard input or output. With --format json, every command that \
            prints records prints JSON Lines of one schema (a schema version and a record type on every line).

            Exit status, the same for every command:
            \(ExitStatus.table)
            """,
        version: SottoVersion.current,
        subcommands: [Send.self, Decode.self, Listen.self, Devices.self, Publish.self, Subscribe.self, Beacon.self, Serve.self, Admin.self, DaemonCommand.self, Ops.self, ConsentCommand.self, Load.self, Profiles.self, Simulate.self, Bench.self, Tune.self, MakeFixtures.self])

    /// Parses, runs, and reports a failure with the exit status of ``ExitStatus``: a usage error (also one
    /// found while running) with the usage of the subcommand that was run, not the top level's.
    static func main() async {
        // A reader that goes away is seen as EPIPE by the write, which ends the program quietly (Output): the
        // same in every command, whether or not a library (NIO) has already ignored the signal.
        signal(SIGPIPE, SIG_IGN)
        // SIGINT and SIGTERM: default actions until a long-running command stops on them (Interruption).
        Interruption.prepare()
        let command: any ParsableCommand
        if let unknown = unknownHelpTopic(Array(CommandLine.arguments.dropFirst())) {
            printError("error: no command '\(unknown)' to show help for\nUsage: sotto help <subcommand>\n  See 'sotto --help' for the commands.")
            Foundation.exit(ExitStatus.usage.rawValue)
        }
        do { command = try parseAsRoot() } catch { finish(withError: error) }
        do {
            var running = command
            if var asyncCommand = running as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try running.run()
            }
        } catch {
            // The reader of an audio stream on stdout went away: no failure to report (see Output).
            if StandardOutput.readerClosed.isSet { Foundation.exit(ExitStatus.success.rawValue) }
            ProgressLine.shared.clear()
            report(error, of: type(of: command))
        }
    }

    /// The subcommand names leading to `command`, e.g. ["bench", "sweep"].
    static func names(of command: any ParsableCommand.Type, under root: any ParsableCommand.Type = Sotto.self) -> [String] {
        for sub in root.configuration.subcommands {
            if sub == command { return [sub._commandName] }
            let below = names(of: command, under: sub)
            if !below.isEmpty { return [sub._commandName] + below }
        }
        return []
    }

    /// ArgumentParser's `exit(withError:)`, with its message (help, version, a parse error) written through
    /// ``Output`` and ``StandardError``: a failed write is an error, not an exit 0 with the text lost.
    static func finish(withError error: any Error) -> Never {
        let message = fullMessage(for: error)
        let code = exitCode(for: error)
        if code == .success {
            if !message.isEmpty { Output.line(message) }
        } else if !message.isEmpty {
            // One error style: "error: ..." in lower case, ArgumentParser's own messages too.
            printError(message.hasPrefix("Error: ") ? "error: " + message.dropFirst(7) : message)
        }
        Foundation.exit(code.rawValue)
    }

    /// The first word after `help` (or before `--help`'s subcommands, `sotto help a b`) that names no
    /// subcommand: `sotto help nonexistent` is a usage error, not the top level's help with status 0.
    static func unknownHelpTopic(_ arguments: [String]) -> String? {
        guard arguments.first == "help" else { return nil }
        var command: any ParsableCommand.Type = Sotto.self
        for word in arguments.dropFirst() where !word.hasPrefix("-") {
            guard let sub = command.configuration.subcommands.first(where: { $0._commandName == word || $0.configuration.aliases.contains(word) }) else {
                return word
            }
            command = sub
        }
        return nil
    }

    static func report(_ error: any Error, of command: any ParsableCommand.Type) -> Never {
        switch error {
        case let error as ValidationError:
            // A long usage is shortened by ArgumentParser to the command and "<options>", without its label.
            var usage = Sotto.usageString(for: command).trimmingCharacters(in: .whitespaces)
            if !usage.hasPrefix("Usage:") { usage = "Usage: " + usage }
            printError("error: \(error.message)\n\(usage)\n  See 'sotto help \(names(of: command).joined(separator: " "))' for more information.")
            Foundation.exit(ExitStatus.usage.rawValue)
        case let error as ExitCode:
            Foundation.exit(error.rawValue)
        case is CleanExit:
            finish(withError: error)
        case _ where String(reflecting: type(of: error)).hasPrefix("ArgumentParser."):
            // Help and completion requests, thrown by ArgumentParser's own commands.
            finish(withError: error)
        default:
            printError("error: \(error)")
            Foundation.exit(ExitStatus.failure.rawValue)
        }
    }
}

/// The exit statuses of every command.
enum ExitStatus: Int32, CaseIterable {
    /// Done (a decode that found no frame is done too; an interrupted listen or send ends with 0).
    case success = 0
    /// The command ran but its check failed: `bench fixtures` missed an expected token or decoded another.
    case checkFailed = 1
    /// A run-time failure: an input, output, device or service that could not be read, written or reached.
    case failure = 2
    /// A usage error: an unknown option, a bad value, options that do not go together (with the usage).
    case usage = 64

    var meaning: String {
        switch self {
        case .success: return "success (also: no frame found; stopped with Ctrl-C)"
        case .checkFailed: return "a check failed (bench fixtures: a token missed or unexpected)"
        case .failure: return "run-time failure: an input, output, device or service failed"
        case .usage: return "usage error: bad option or value, options that do not go together"
        }
    }

    /// The table for help and the docs.
    static var table: String {
        allCases.map { "  \($0.rawValue)\($0.rawValue < 10 ? " " : "")  \($0.meaning)" }.joined(separator: "\n")
    }
}
