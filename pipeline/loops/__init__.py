"""What spans both wings: labelling rounds (collect, label, train, collect again) and the page
of teachers and agents (`reports/knowledge.md`)."""
