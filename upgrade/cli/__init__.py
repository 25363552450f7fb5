"""Command lines, one module per console script, each thin: parse the arguments, call the stage that does the work,
print. ``common`` holds the guard (one line and exit status 2 for a user's mistake) and the number parsing."""
