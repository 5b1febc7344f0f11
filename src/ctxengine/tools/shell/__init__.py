"""Shell command lines of a shell tool call: ``commands`` (the commands and the files they read),
``parse`` (bashlex, the real parser), ``plain`` (what bashlex gives for a plain script, without
bashlex) and ``scan`` (the hand-written splitter it falls back to).

May import: the standard library and bashlex only.
"""
