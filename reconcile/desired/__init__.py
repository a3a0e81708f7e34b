"""The desired state: the kinds a `desired/` tree declares (pydantic models), the reader
that validates it with `file:line:col` diagnostics, and the round-trip writer that edits
it keeping comments. The only package that imports a YAML library."""
