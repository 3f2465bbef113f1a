from loongsage.transfer.buckets import iter_buckets
from loongsage.transfer.direct_push import push_weights
from loongsage.transfer.push import PushFailed

__all__ = ["PushFailed", "iter_buckets", "push_weights"]
