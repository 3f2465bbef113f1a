from loongsage.controller.run import run

__all__ = ["run"]
