"""The app's view of an opened folder as a whole: the Folder pane lists every entry of each
folder opened, one line each (skipped files and folders the walk did not enter included),
as `scan DIR` prints them. A view over the scan results (`scan.advice.entry_line`): it
decides nothing. May import `core`, `scan.advice`, `scan.result` and Qt."""
