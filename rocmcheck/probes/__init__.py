"""The built-in probe library: one module per failure family.

The registry loads these modules by path (`registry.load_all`), never by importing this
package, so loading them stays cheap and torch stays unimported in the parent.
"""
