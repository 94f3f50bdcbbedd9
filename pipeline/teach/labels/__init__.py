"""Label tasks (prompt template + parser + schema), the label cache and the label stage."""
