"""What users read: summary.json/csv and the printed table, details.json, Chrome traces,
report.html with its figures and topology drawing, and the validation report."""
