"""`python -m loongsage.inference.embedded --model-path DIR [SGLang launch_server flags]`."""

from loongsage.inference.embedded.cli import main

raise SystemExit(main())
