import CSottoShims

/// The device and inode of an open descriptor (what `JOURNAL_STREAM` names), nil when `fstat` fails.
func fileIdentity(of descriptor: Int32) -> (device: UInt64, inode: UInt64)? {
    var device: UInt64 = 0, inode: UInt64 = 0
    guard sotto_fd_identity(descriptor, &device, &inode) == 0 else { return nil }
    return (device, inode)
}
