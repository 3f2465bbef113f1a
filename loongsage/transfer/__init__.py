from loongsage.transfer.buckets import iter_buckets
from loongsage.transfer.push import PushFailed, push_weights
from loongsage.transfer.transports import unpack_named_tensors

__all__ = ["PushFailed", "iter_buckets", "push_weights", "unpack_named_tensors"]
