enum ClientPlaceholder {}
