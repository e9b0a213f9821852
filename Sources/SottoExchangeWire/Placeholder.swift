// Generated code lands here (scripts/generate-protos).
