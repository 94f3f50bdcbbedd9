"""Stage one's labelling on top of the label layer (pipeline.teach.labels: prompts, parsers, schema,
status, cache) and the teachers: the label stage's orchestration (`label`) and the audit of what
the teachers said (`audit`). Nothing below imports this package."""
