from loongsage.transfer.buckets import iter_buckets
from loongsage.transfer.mesh import push_weights
from loongsage.transfer.push import PushFailed
from loongsage.transfer.transports import unpack_named_tensors

__all__ = ["PushFailed", "iter_buckets", "push_weights", "unpack_named_tensors"]
