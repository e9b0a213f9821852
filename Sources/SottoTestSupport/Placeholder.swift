// placeholder, replaced by the module's real sources
