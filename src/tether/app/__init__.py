"""Where capabilities meet: wiring and supervision of tether's long-running parts."""
