"""What every test runs with, however the suite was launched."""

import signal

# A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits
# SIGINT ignored, and so would every process it starts (a disposition of SIG_IGN survives
# exec): a test that types Ctrl-C at a terminal would then type nothing, and the command it
# drives would wait forever. A person's terminal delivers it; so does this suite's. (A Python
# handler, unlike SIG_IGN, is reset to the default in the programs the tests start.)
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
