"""The weights' wire format, below the senders (the transfer package), which share it: the
bucket layout, the receive side of every payload, and the weight-update process group."""
