"""What trainers send: parsing and validation, with no web framework in sight."""
