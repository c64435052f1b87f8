"""pages: the one kit for what people look at: the HTML page, tables and figure helpers (`html`),
and the training curves (`plots`). Shared by the engine's logger, interp, the studies and the
microscope; imports nothing of the package.
"""
