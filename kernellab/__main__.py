from kernellab.cli import main

raise SystemExit(main())
