// Only a header: LLVMFuzzerRunDriver is defined by the libFuzzer runtime.
