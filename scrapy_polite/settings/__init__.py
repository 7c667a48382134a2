"""Every POLITE_* setting, its default and its validation, read once into a typed config."""
