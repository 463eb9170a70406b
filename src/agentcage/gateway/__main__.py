import sys

from agentcage.gateway.main import main

sys.exit(main())
