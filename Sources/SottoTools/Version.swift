/// The version of Sotto (`sotto --version`, the JSON Lines schema has its own: ``JSONLines/schemaVersion``).
public enum SottoVersion {
    public static let current = "1.0.0"
}
